// The parameters and running statistics of a contiguous run of a network's
// blocks, [First, End), held on their own (floor 5): what one pipeline stage
// needs when the rest of the network lives elsewhere (another process), so
// that memory follows the blocks held, not the network.
//
//   parameter_slice<net, 2, 5, float> slice(/*seed=*/1);  // blocks 2, 3, 4 as make_parameters(1) gives them
//   std::span<float, decltype(slice)::parameter_count> values = slice.values();
//   slice.copy_into(whole);                                // into a network_parameters, at their offsets
//
// The layout is the network's own, cut at First: block I's values start at
// parameter_offsets[I] - parameter_offsets[First] (Network::parameters_of<I,
// First> cuts them), and so do the running statistics. A slice made from a
// seed holds exactly what network_parameters(seed) holds for these blocks:
// the blocks before First are initialised too, one at a time into a scratch
// array the size of the largest of them, so that the one generator draws
// the same numbers.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>

#include <petra/kernels/simd.hpp>
#include <petra/layers/layer.hpp>
#include <petra/network.hpp>
#include <petra/state_archive.hpp>
#include <petra/type_list.hpp>

namespace petra {

template <class Network, std::size_t First, std::size_t End, class T>
class parameter_slice {
    static_assert(is_network<Network>::value, "parameter_slice needs a network<input<C, H, W>, Block...>.");
    static_assert(First < End && End <= Network::block_count,
                  "A parameter slice holds at least one block, and only blocks of the network.");

public:
    static constexpr std::size_t first_block = First;
    static constexpr std::size_t end_block = End;
    static constexpr std::size_t parameter_offset = Network::parameter_offsets[First];
    static constexpr std::size_t parameter_count = Network::parameter_offsets[End] - parameter_offset;
    static constexpr std::size_t state_offset = Network::state_offsets[First];
    static constexpr std::size_t state_count = Network::state_offsets[End] - state_offset;

    // What Network::make_parameters<T>(seed) holds for these blocks.
    explicit parameter_slice(std::uint64_t seed) : values_(parameter_count), state_(state_count)
    {
        std::mt19937_64 generator(seed);
        std::size_t largest_before = 0, largest_state_before = 0;
        for (std::size_t i = 0; i < First; ++i) {
            largest_before = std::max(largest_before, Network::profile[i].parameter_count);
            largest_state_before = std::max(largest_state_before, Network::profile[i].state_count);
        }
        kernels::aligned_vector<T> scratch(largest_before), scratch_state(largest_state_before);
        for_each_index<End>([&](auto index) {
            constexpr std::size_t i = decltype(index)::value;
            using block = typename Network::template block<i>;
            if constexpr (i < First) {
                block::initialize(std::span<T, block::parameter_count>(scratch.data(), block::parameter_count),
                                  std::span<T, block::state_count>(scratch_state.data(), block::state_count),
                                  generator);
            } else {
                block::initialize(block_values<i>(), block_state<i>(), generator);
            }
        });
    }

    // A copy of these blocks' values in a whole network's parameters.
    explicit parameter_slice(const network_parameters<Network, T>& whole)
        : values_(parameter_count), state_(state_count)
    {
        std::copy_n(whole.values().begin() + parameter_offset, parameter_count, values_.begin());
        std::copy_n(whole.state().begin() + state_offset, state_count, state_.begin());
    }

    std::span<T, parameter_count> values() { return std::span<T, parameter_count>(values_.data(), parameter_count); }
    std::span<const T, parameter_count> values() const
    {
        return std::span<const T, parameter_count>(values_.data(), parameter_count);
    }
    std::span<T, state_count> state() { return std::span<T, state_count>(state_.data(), state_count); }
    std::span<const T, state_count> state() const
    {
        return std::span<const T, state_count>(state_.data(), state_count);
    }

    // Block I's values and running statistics (First <= I < End).
    template <std::size_t I>
    auto block_values()
    {
        return Network::template parameters_of<I, First>(values());
    }
    template <std::size_t I>
    auto block_state()
    {
        return Network::template state_of<I, First>(state());
    }

    // Writes these blocks' values into a whole network's parameters.
    void copy_into(network_parameters<Network, T>& whole) const
    {
        // Skipped when empty: a copy of nothing to the end of the state (the
        // head's slice) is reported by g++ 12 as an overflow.
        if constexpr (parameter_count > 0)
            std::copy(values_.begin(), values_.end(), whole.values().begin() + parameter_offset);
        if constexpr (state_count > 0) std::copy(state_.begin(), state_.end(), whole.state().begin() + state_offset);
    }

    // One value per parameter of these blocks: 1 for a weight (subject to
    // weight decay), 0 otherwise; Network::weight_mask() cut at First.
    static kernels::aligned_vector<T> weight_mask()
    {
        kernels::aligned_vector<T> mask(parameter_count);
        const std::span<T, parameter_count> all(mask.data(), parameter_count);
        for_each_index<End - First>([&](auto index) {
            constexpr std::size_t i = First + decltype(index)::value;
            mark_weights<typename Network::template block<i>, T>(Network::template parameters_of<i, First>(all));
        });
        return mask;
    }

    std::size_t memory_bytes() const { return (values_.size() + state_.size()) * sizeof(T); }

    // The values and running statistics, for checkpoints.
    template <state_archive Archive>
    void transfer_state(Archive& archive)
    {
        transfer(archive, values(), state());
    }

    // The same records for these blocks' values held anywhere (a whole
    // network's parameters cut at First), so that a slice saved by one
    // process loads into another's whole network, and back.
    template <state_archive Archive>
    static void transfer(Archive& archive, std::span<T, parameter_count> values, std::span<T, state_count> state)
    {
        archive.section("parameter slice");
        archive.expect(First, "first block of the slice");
        archive.expect(End, "end block of the slice");
        archive.expect(parameter_count, "parameter count");
        archive.expect(state_count, "running-statistics count");
        archive.expect(sizeof(T), "bytes per value");
        archive.values(std::span<T>(values));
        archive.values(std::span<T>(state));
    }

private:
    kernels::aligned_vector<T> values_;
    kernels::aligned_vector<T> state_;
};

} // namespace petra
