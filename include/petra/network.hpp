// network<input<C, H, W>, Block...>: a network is a type, a list of blocks
// that reads like the architecture diagram:
//
//   using net = network<input<1, 28, 28>,
//                       stem<chain<conv2d<1, 32>, batch_norm<32>, relu>>,
//                       repeated<2, additive_coupling<residual<16>>>,
//                       downsampling<16>,
//                       classifier_head<64, 10>>;
//
// Each block is bound to the output of the one before (floor 5: blocks are
// floor 4). A block that cannot take that output is reported by one
// static_assert sentence whose template arguments name the two blocks. Every
// figure a scheduler needs is a constexpr value: per block (profile[i]) the
// parameter count, FLOPs per example and activation size, and in total.
//
// All parameters of a network live in one contiguous array, block after
// block (parameter_offsets), and so do the untrained state values (running
// statistics, state_offsets); network_parameters holds both, and any array
// laid out like the parameters (a gradient, a momentum) is cut into block
// views with parameters_of<I>.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include <boost/hana/flatten.hpp>
#include <boost/hana/fold_left.hpp>
#include <boost/hana/tuple.hpp>
#include <boost/hana/type.hpp>

#include <petra/batch_view.hpp>
#include <petra/blocks/block.hpp>
#include <petra/error.hpp>
#include <petra/kernels/scratch.hpp>
#include <petra/kernels/simd.hpp>
#include <petra/layers/chain.hpp>
#include <petra/layers/layer.hpp>
#include <petra/layers/precision.hpp>
#include <petra/owned_batch.hpp>
#include <petra/parameter_names.hpp>
#include <petra/shape.hpp>
#include <petra/state_archive.hpp>
#include <petra/tensor_batch.hpp>
#include <petra/type_list.hpp>

namespace petra {

// The shape of a network's input, one example: channels, height, width.
template <std::size_t Channels, std::size_t Height = 1, std::size_t Width = 1>
using input = shape<Channels, Height, Width>;

// Several consecutive blocks given as one element of a network.
template <class... Blocks>
struct block_sequence {};

namespace detail {

template <class Block, std::size_t>
using repeat_block = Block;

template <class Block, std::size_t... I>
block_sequence<repeat_block<Block, I>...> repeat(std::index_sequence<I...>);

} // namespace detail

// Count copies of Block in a row (each with its own parameters).
template <std::size_t Count, class Block>
using repeated = decltype(detail::repeat<Block>(std::make_index_sequence<Count>{}));

// What a block costs, per example, as a scheduler sees it.
struct block_profile {
    bool reversible;
    std::size_t parameter_count;
    std::size_t state_count;
    std::size_t forward_flops;
    std::size_t backward_flops;             // the vector-Jacobian product alone
    std::size_t input_values;               // activation entering the block
    std::size_t output_values;              // activation leaving it
    std::size_t kept_values;                // what its forward keeps for backward (workspace of one example)
    std::size_t winograd_forward_flops = 0; // the part of forward_flops in Winograd's form
    bool passes_first_half_through = false; // passes_first_half_through_of (blocks/block.hpp)
    // Whether recomputing it for its backward may write its output
    // (recomputation_writes_output, layers/layer.hpp): a stage lends a
    // buffer for that only where one of its kept blocks may.
    bool recomputation_writes_output = true;

    // One pipeline tick of PETRA spends a forward, a reconstruction (the
    // inverse, or the forward again from a stored input: the same function
    // evaluations) and a backward.
    constexpr std::size_t tick_flops() const { return 2 * forward_flops + backward_flops; }

    // Values a tick moves through memory, per example, as a proxy: the
    // block's input, output and kept intermediates. Batch norm, ReLU and the
    // additions are memory-bound, so blocks of equal FLOPs at a higher
    // resolution take longer.
    constexpr std::size_t traffic_values() const { return input_values + output_values + kept_values; }

    // The cost model's two constants, chosen against what every run of the
    // reference network's blocks costs as a stage (scripts/calibrate's
    // measurement: one core, batch 64; bench/RESULTS.md, "Stage ticks and
    // cuts"): a FLOP in Winograd's form costs 55% of a direct one (the 3x3
    // stride-1 convolutions run 1.5 to 2.2 times faster in it), and a value
    // of traffic 75 FLOPs. With them the model's cuts of 2 to 6 stages are
    // the best cuts of the stage ticks measured on Zen 5 with AVX-512, AVX2
    // and SSE2 (tests/pipeline/test_partition.cpp), as with any traffic
    // price from 50 to 100 and a Winograd price from 45% to 65%. Blocks
    // timed one by one mislead: a stage ticks up to a quarter slower than
    // the sum of its blocks' ticks (a larger working set; a kept-input
    // block's copy into the stage's queue), one holding the network's first
    // block up to 6% faster; fitted to them, the traffic price was 300 with
    // AVX-512, which cut 2 and 3 stages a block too early.
    static constexpr std::size_t winograd_cost_percent = 55;
    static constexpr std::size_t flops_per_traffic_value = 75;

    // FLOP-equivalents of `flops`, of which `winograd` run in Winograd's form.
    static constexpr std::size_t priced_flops(std::size_t flops, std::size_t winograd)
    {
        return flops - winograd + winograd * winograd_cost_percent / 100;
    }

    // What a stage spends on the block per tick, per example, in
    // FLOP-equivalents: the partitioner balances this. A tick runs the
    // forward twice (forward and reconstruction) and the backward, which
    // runs twice the forward's Winograd FLOPs.
    constexpr std::size_t tick_cost() const
    {
        return priced_flops(tick_flops(), 4 * winograd_forward_flops) + flops_per_traffic_value * traffic_values();
    }
    // The same in the last stage, which keeps what its backward needs and
    // so spends no reconstruction: a forward and a backward.
    constexpr std::size_t last_stage_tick_cost() const
    {
        return priced_flops(forward_flops + backward_flops, 3 * winograd_forward_flops) +
               flops_per_traffic_value * traffic_values();
    }
    // Bytes of the activation leaving the block, for values of Value bytes.
    constexpr std::size_t output_bytes(std::size_t value_bytes) const { return output_values * value_bytes; }
};

template <class Network, class T>
class network_parameters;

namespace detail {

struct inference_offsets;
template <class Network, class T>
constexpr inference_offsets inference_layout(std::size_t batch);

// The element check: names the offending element in its template argument.
template <class Element>
struct network_element {
    static constexpr bool value = a_block<Element>;
    static_assert(value, "Every element of a network after its input must be a block (a coupling, stem, "
                         "downsample or head), not a layer.");
};

// What an element that is not a block becomes once reported: it stops the
// binding.
struct not_a_block {};

// An element of a network as a type list of blocks (a block_sequence is
// flattened).
template <class Element>
constexpr auto blocks_of(std::type_identity<Element>)
{
    if constexpr (a_block<Element>) {
        return type_list<Element>;
    } else {
        return type_list<std::conditional_t<network_element<Element>::value, Element, not_a_block>>;
    }
}
template <class... Blocks>
constexpr auto blocks_of(std::type_identity<block_sequence<Blocks...>>)
{
    return boost::hana::flatten(boost::hana::make_tuple(blocks_of(std::type_identity<Blocks>{})...));
}

// The binding checks: each names, in its template arguments, what disagrees.
template <class Input, class FirstBlock>
struct network_input_fits {
    static constexpr bool value = block_accepts<FirstBlock, Input>();
    static_assert(value, "The first block of the network cannot take the network's input shape.");
};

template <class Before, class After, class BeforeOutput>
struct consecutive_blocks {
    static constexpr bool value = block_accepts<After, BeforeOutput>();
    static_assert(value, "A block cannot take the output of the block before it: their shapes do not match.");
};

// Whether Block can follow Last (void: Block comes first), instantiating the
// one check that names the pair.
template <class Last, class Block, class Output>
constexpr bool link_fits()
{
    if constexpr (std::is_void_v<Last>) {
        return network_input_fits<Output, Block>::value;
    } else {
        return consecutive_blocks<Last, Block, Output>::value;
    }
}

// What follows a block that could not be bound: later blocks are neither
// checked nor bound, so that the first error stays the only one.
struct no_output {};

// The state of the left fold that binds the blocks in order: the output so
// far, the last unbound block (void before the first) and the bound blocks.
template <class Output, class Last, class... Bound>
struct binding {
    using output = Output;
};

inline constexpr auto bind_next_block = []<class Output, class Last, class... Bound, class Block>(
                                            binding<Output, Last, Bound...>, boost::hana::basic_type<Block>) {
    if constexpr (std::is_same_v<Output, no_output> || !a_block<Block>) {
        return binding<no_output, Block, Bound...>{};
    } else if constexpr (!link_fits<Last, Block, Output>()) {
        return binding<no_output, Block, Bound...>{};
    } else if constexpr (!block_contract<Block, Output>::value) {
        return binding<no_output, Block, Bound...>{};
    } else {
        using bound = layer_for<Block, Output>;
        return binding<typename bound::output, Block, Bound..., bound>{};
    }
};

// Blocks bound in order from Input (if Input is a shape: otherwise that
// error is reported on its own and nothing is bound).
template <class Input, class... Elements>
using bind_network = decltype(boost::hana::fold_left(
    boost::hana::flatten(boost::hana::make_tuple(blocks_of(std::type_identity<Elements>{})...)),
    binding<std::conditional_t<a_shape<Input>, Input, no_output>, void>{}, bind_next_block));

// One field of every profile.
template <std::size_t N>
constexpr std::array<std::size_t, N> each(const std::array<block_profile, N>& profiles,
                                          std::size_t block_profile::*field)
{
    std::array<std::size_t, N> values{};
    for (std::size_t i = 0; i < N; ++i) values[i] = profiles[i].*field;
    return values;
}

template <class Binding>
struct bound_network;

template <class Output, class Last, class... Bound>
struct bound_network<binding<Output, Last, Bound...>> {
    static constexpr std::size_t block_count = sizeof...(Bound);
    static constexpr auto blocks = type_list<Bound...>;
    static constexpr std::array<block_profile, block_count> profile{block_profile{
        Bound::reversible, Bound::parameter_count, Bound::state_count, Bound::forward_flops, Bound::backward_flops,
        Bound::input::size, Bound::output::size, Bound::workspace_size(1), winograd_forward_flops_of<Bound>(),
        passes_first_half_through_of<Bound>, recomputation_writes_output<Bound>()}...};

    static constexpr std::size_t largest_workspace(std::size_t batch)
    {
        return std::max({std::size_t{0}, Bound::workspace_size(batch)...});
    }
    template <class T>
    static constexpr kernels::scratch_demand forward_scratch(std::size_t batch, precision arithmetic = precision::fp32)
    {
        kernels::scratch_demand demand;
        (demand.merge(forward_scratch_of<Bound, T>(batch, arithmetic)), ...);
        return demand;
    }
    static constexpr std::array<std::size_t (*)(std::size_t), block_count> workspace_sizes{&Bound::workspace_size...};
};

} // namespace detail

template <class Input, class... Elements>
class network {
    static_assert(a_shape<Input>, "A network begins with the shape of its input, input<C, H, W>.");
    static_assert(sizeof...(Elements) > 0, "A network needs at least one block.");

    using binding = detail::bind_network<Input, Elements...>;
    using bound = detail::bound_network<binding>;

public:
    using input = Input;
    using output = typename binding::output;

    static constexpr std::size_t block_count = bound::block_count;

    // The bound blocks, as a type list (type_list.hpp) and one by one.
    static constexpr auto blocks = bound::blocks;
    template <std::size_t I>
    using block = type_at<I, decltype(blocks)>;

    static constexpr std::array<block_profile, block_count> profile = bound::profile;

    static constexpr auto parameter_offsets =
        detail::prefix_sums<block_count>(detail::each(profile, &block_profile::parameter_count));
    static constexpr auto state_offsets =
        detail::prefix_sums<block_count>(detail::each(profile, &block_profile::state_count));
    static constexpr std::size_t parameter_count = parameter_offsets[block_count];
    static constexpr std::size_t state_count = state_offsets[block_count];

    // Totals per example.
    static constexpr std::size_t forward_flops = [] {
        std::size_t total = 0;
        for (const block_profile& p : profile) total += p.forward_flops;
        return total;
    }();
    static constexpr std::size_t backward_flops = [] {
        std::size_t total = 0;
        for (const block_profile& p : profile) total += p.backward_flops;
        return total;
    }();
    // The largest activation between (or around) blocks, values per example.
    static constexpr std::size_t largest_activation = [] {
        std::size_t largest = input::size;
        for (const block_profile& p : profile) largest = std::max(largest, p.output_values);
        return largest;
    }();

    // A fingerprint of the architecture, for checkpoints: FNV-1a over the
    // input shape and every block's profile (kind, parameter and state
    // counts, FLOPs, activation sizes between blocks). Two networks that
    // differ only in an activation function or another parameter-free layer
    // share it. What a block keeps for its backward is left out: it is how
    // the library computes (fusion changes it), not what it trains.
    static constexpr std::uint64_t signature = [] {
        std::uint64_t hash = 14695981039346656037ull;
        auto mix = [&](std::uint64_t value) {
            for (int byte = 0; byte < 8; ++byte) {
                hash ^= (value >> (8 * byte)) & 0xff;
                hash *= 1099511628211ull;
            }
        };
        mix(input::channels);
        mix(input::height);
        mix(input::width);
        mix(block_count);
        for (const block_profile& p : profile) {
            mix(p.reversible);
            mix(p.parameter_count);
            mix(p.state_count);
            mix(p.forward_flops);
            mix(p.backward_flops);
            mix(p.input_values);
            mix(p.output_values);
        }
        return hash;
    }();

    // Workspace of block i for a batch, and the largest over all blocks.
    static constexpr std::size_t workspace_size(std::size_t i, std::size_t batch)
    {
        return bound::workspace_sizes[i](batch);
    }
    static constexpr std::size_t largest_workspace(std::size_t batch) { return bound::largest_workspace(batch); }

    // The kernel scratch of the blocks' forwards for a batch, one after
    // another (kernels/scratch.hpp).
    template <class T = float>
    static constexpr kernels::scratch_demand forward_scratch(std::size_t batch, precision arithmetic = precision::fp32)
    {
        return bound::template forward_scratch<T>(batch, arithmetic);
    }

    // Bytes of the caller's workspace predict needs for a batch of values
    // of type T: the activations between blocks, a block's workspace and
    // the kernels' scratch, each on a cache-line boundary, and one cache
    // line's slack so that the workspace itself may start anywhere. A
    // constant of the network and the instruction set the program is
    // compiled for:
    //   alignas(64) static std::byte workspace[net::inference_workspace_bytes(64)];
    template <class T = float>
    static constexpr std::size_t inference_workspace_bytes(std::size_t batch)
    {
        return detail::inference_layout<network, T>(batch).bytes + kernels::buffer_alignment - 1;
    }

    // Block I's part of an array laid out like the parameters (values,
    // gradients, optimizer state) of blocks First, First + 1, ...: the whole
    // network's by default, or a stage's (First its first block). A span of
    // static extent, const or not as given.
    template <std::size_t I, std::size_t First = 0, class T, std::size_t Extent>
    static constexpr auto parameters_of(std::span<T, Extent> values)
    {
        static_assert(First <= I && I < block_count, "Block I is not one of the blocks the array holds.");
        return values.template subspan<parameter_offsets[I] - parameter_offsets[First], profile[I].parameter_count>();
    }
    // The same for an array laid out like the state (running statistics).
    template <std::size_t I, std::size_t First = 0, class T, std::size_t Extent>
    static constexpr auto state_of(std::span<T, Extent> values)
    {
        static_assert(First <= I && I < block_count, "Block I is not one of the blocks the array holds.");
        return values.template subspan<state_offsets[I] - state_offsets[First], profile[I].state_count>();
    }

    // Every parameter array and running statistic, named by the rule of
    // parameter_names.hpp (blocks.1.f.0.weight, ...), with its place in
    // values() or state() and its shape: a constexpr std::array<named_array, N>.
    static constexpr const auto& parameter_names()
    {
        static_assert(detail::names_are_distinct(parameter_names_of<network>),
                      "Two arrays of the network have the same name: a block's part_names repeat a name.");
        return parameter_names_of<network>;
    }

    // Parameters and state initialised block after block from one generator
    // seeded with seed (He-normal weights, batch-norm scale 1 and shift 0).
    template <class T>
    static network_parameters<network, T> make_parameters(std::uint64_t seed)
    {
        return network_parameters<network, T>(seed);
    }

    // One value per parameter: 1 for a weight (subject to weight decay), 0
    // for a bias or a batch-norm scale or shift.
    template <class T>
    static kernels::aligned_vector<T> weight_mask()
    {
        kernels::aligned_vector<T> mask(parameter_count);
        for_each_block([&](auto i) { petra::mark_weights<block<i>, T>(parameters_of<i>(std::span<T>(mask))); });
        return mask;
    }

    // Calls visit(index) for each block index 0, 1, ... block_count - 1, in
    // order; index is an integral constant (decltype(index)::value is I).
    template <class Visitor>
    static void for_each_block(Visitor&& visit)
    {
        for_each_index<block_count>(visit);
    }
    // The same from the last block down to block 0.
    template <class Visitor>
    static void for_each_block_down(Visitor&& visit)
    {
        for_each_index_down<block_count>(visit);
    }
};

template <class T>
struct is_network : std::false_type {};
template <class Input, class... Elements>
struct is_network<network<Input, Elements...>> : std::true_type {};

template <class Network, class T>
class network_parameters_view;

// Parameters and state initialised block after block from one generator
// seeded with seed: He-normal weights, batch-norm scale 1 and shift 0, and
// so on, as each layer states. In place, allocating nothing, so that
// parameters in the caller's storage start as make_parameters' do.
template <class Network, class T>
void initialize_parameters(network_parameters_view<Network, T> parameters, std::uint64_t seed)
{
    static_assert(!std::is_const_v<T>, "initialize_parameters writes the parameters: it needs a writable view.");
    std::mt19937_64 generator(seed);
    Network::for_each_block([&](auto i) {
        Network::template block<i>::initialize(parameters.template block_values<i>(),
                                               parameters.template block_state<i>(), generator);
    });
}

// The parameters (trained values) and state (running statistics) of a
// network for value type T, each one contiguous aligned array.
template <class Network, class T>
class network_parameters {
    static_assert(is_network<Network>::value, "network_parameters needs a network<input<C, H, W>, Block...>.");
    static_assert(std::is_floating_point_v<T>, "Parameters are float or double.");

public:
    using network_type = Network;
    using value_type = T;

    explicit network_parameters(std::uint64_t seed) : values_(Network::parameter_count), state_(Network::state_count)
    {
        initialize_parameters(network_parameters_view<Network, T>(*this), seed);
    }

    std::span<T> values() { return values_; }
    std::span<const T> values() const { return values_; }
    std::span<T> state() { return state_; }
    std::span<const T> state() const { return state_; }

    // Block I's parameters and state: spans of static extent, read-only
    // through a const network_parameters.
    template <std::size_t I>
    auto block_values()
    {
        return Network::template parameters_of<I>(values());
    }
    template <std::size_t I>
    auto block_values() const
    {
        return Network::template parameters_of<I>(values());
    }
    template <std::size_t I>
    auto block_state()
    {
        return Network::template state_of<I>(state());
    }
    template <std::size_t I>
    auto block_state() const
    {
        return Network::template state_of<I>(state());
    }

    // Parameters and running statistics, for checkpoints.
    template <state_archive Archive>
    void transfer_state(Archive& archive)
    {
        archive.section("network parameters");
        archive.expect(Network::parameter_count, "parameter count");
        archive.expect(Network::state_count, "running-statistics count");
        archive.expect(sizeof(T), "bytes per value");
        archive.values(std::span<T>(values_));
        archive.values(std::span<T>(state_));
    }

private:
    kernels::aligned_vector<T> values_;
    kernels::aligned_vector<T> state_;
};

// A network's parameters and state in memory the view does not own, laid out
// as network_parameters lays them out (values() block after block, then
// state()): the caller's arrays, in static storage, a trained model compiled
// into the program as constexpr arrays, or a blob mapped from flash.
// network_parameters_view<Net, const T> reads (inference); a view of T may
// also be trained (the trainers and pipelines take views, and a
// network_parameters converts to either).
//
//   static constexpr std::array<float, net::parameter_count> values{...};
//   static constexpr std::array<float, net::state_count> state{...};
//   constexpr network_parameters_view<net, const float> trained(values, state);
template <class Network, class T>
class network_parameters_view {
    static_assert(is_network<Network>::value, "network_parameters_view needs a network<input<C, H, W>, Block...>.");
    static_assert(std::is_floating_point_v<std::remove_const_t<T>>, "Parameters are float or double.");

public:
    using network_type = Network;
    using value_type = std::remove_const_t<T>;
    using values_span = std::span<T, Network::parameter_count>;
    using state_span = std::span<T, Network::state_count>;

    constexpr network_parameters_view(values_span values, state_span state) noexcept : values_(values), state_(state) {}
    // The arrays of a network_parameters (only read-only ones from a const
    // network_parameters).
    constexpr network_parameters_view(network_parameters<Network, value_type>& parameters) noexcept
        : values_(parameters.values().template first<Network::parameter_count>()),
          state_(parameters.state().template first<Network::state_count>())
    {}
    constexpr network_parameters_view(const network_parameters<Network, value_type>& parameters) noexcept
        requires(std::is_const_v<T>)
        : values_(parameters.values().template first<Network::parameter_count>()),
          state_(parameters.state().template first<Network::state_count>())
    {}
    // A read-only view of a writable one.
    template <class Writable>
        requires std::is_const_v<T> && std::is_same_v<Writable, value_type>
    constexpr network_parameters_view(const network_parameters_view<Network, Writable>& writable) noexcept
        : values_(writable.values()), state_(writable.state())
    {}

    constexpr values_span values() const noexcept { return values_; }
    constexpr state_span state() const noexcept { return state_; }

    // Block I's parameters and state, spans of static extent.
    template <std::size_t I>
    constexpr auto block_values() const noexcept
    {
        return Network::template parameters_of<I>(values_);
    }
    template <std::size_t I>
    constexpr auto block_state() const noexcept
    {
        return Network::template state_of<I>(state_);
    }

private:
    values_span values_;
    state_span state_;
};

// What predict reads parameters from: a network_parameters or a
// network_parameters_view (of T or const T).
template <class P>
concept network_parameters_like =
    (is_network<typename P::network_type>::value && std::is_floating_point_v<typename P::value_type> &&
     (std::is_same_v<P, network_parameters<typename P::network_type, typename P::value_type>> ||
      std::is_same_v<P, network_parameters_view<typename P::network_type, typename P::value_type>> ||
      std::is_same_v<P, network_parameters_view<typename P::network_type, const typename P::value_type>>));

namespace detail {

// Where predict puts what it needs in the caller's workspace, from its first
// cache-line boundary on: `buffers` buffers of buffer_values values each for
// the activations between blocks (none with one block, one with two, two
// that alternate from three blocks on), one block's workspace, then the
// kernels' scratch, each on a cache-line boundary; bytes in all.
struct inference_offsets {
    std::size_t buffers = 0;
    std::size_t buffer_values = 0;
    std::size_t buffer_bytes = 0;
    std::size_t workspace_offset = 0;
    std::size_t workspace_values = 0;
    std::size_t scratch_offset = 0;
    std::size_t bytes = 0;
};

template <class Network, class T>
constexpr inference_offsets inference_layout(std::size_t batch)
{
    inference_offsets layout;
    std::size_t between = 0;
    for (std::size_t i = 0; i + 1 < Network::block_count; ++i) {
        between = std::max(between, Network::profile[i].output_values);
    }
    layout.buffers = std::min<std::size_t>(Network::block_count - 1, 2);
    layout.buffer_values = batch * between;
    layout.buffer_bytes = kernels::region_bytes_of<T>(layout.buffer_values);
    layout.workspace_offset = layout.buffers * layout.buffer_bytes;
    layout.workspace_values = Network::largest_workspace(batch);
    layout.scratch_offset = layout.workspace_offset + kernels::region_bytes_of<T>(layout.workspace_values);
    layout.bytes = layout.scratch_offset + Network::template forward_scratch<T>(batch).region_bytes();
    return layout;
}

struct predict_workspace_tag {};

} // namespace detail

// Inference on a batch in the caller's workspace: the logits of the images,
// with the running statistics of batch normalisation, read-only; nothing is
// updated. Everything it needs (the activations between blocks, a block's
// workspace, every kernel's scratch) is carved from `workspace`, which must
// hold Network::inference_workspace_bytes<T>(batch) bytes, at any alignment
// (static storage works): nothing is allocated; in fp32 whatever the
// thread's precision (layers/precision.hpp). parameters: a
// network_parameters or a network_parameters_view of the caller's arrays.
// A workspace too small is an std::invalid_argument (error.hpp).
template <network_parameters_like Parameters>
void predict(const Parameters& parameters,
             const_batch<typename Parameters::value_type, typename Parameters::network_type::input> images,
             batch_view<typename Parameters::value_type, typename Parameters::network_type::output> logits,
             std::span<std::byte> workspace)
{
    using Network = typename Parameters::network_type;
    using T = typename Parameters::value_type;
    const std::size_t batch = images.batch();
    if (batch == 0) return;
    const detail::inference_offsets layout = detail::inference_layout<Network, T>(batch);
    const std::size_t misalignment = reinterpret_cast<std::uintptr_t>(workspace.data()) % kernels::buffer_alignment;
    const std::size_t skip = misalignment == 0 ? 0 : kernels::buffer_alignment - misalignment;
    if (workspace.size() < skip + layout.bytes) {
        raise_error(error_kind::invalid_argument,
                    "predict: a workspace of " + std::to_string(workspace.size()) + " bytes for a batch of " +
                        std::to_string(batch) + "; it needs Network::inference_workspace_bytes(" +
                        std::to_string(batch) +
                        ") = " + std::to_string(Network::template inference_workspace_bytes<T>(batch)) + ".");
    }
    std::byte* const base = workspace.data() + skip;
    const auto buffer = [&](std::size_t k) { return reinterpret_cast<T*>(base + k * layout.buffer_bytes); };
    const std::span<T> block_workspace(reinterpret_cast<T*>(base + layout.workspace_offset), layout.workspace_values);
    const pass::inference_t inference{.kernel_scratch = workspace.subspan(skip + layout.scratch_offset)};
    const network_parameters_view<Network, const T> values(parameters);
    // Inference is in fp32 whatever the thread's precision (which concerns
    // training steps): the workspace is sized for it, and a network trained
    // in bf16 is scored from its float parameters.
    const precision_scope in_fp32(precision::fp32);
    // Block i reads buffer (i - 1) % 2 and writes buffer i % 2.
    Network::for_each_block([&](auto index) {
        constexpr std::size_t i = decltype(index)::value;
        using block = typename Network::template block<i>;
        const auto x = [&] {
            if constexpr (i == 0) return images;
            else return batch_view<const T, typename block::input>(buffer((i - 1) % 2), batch);
        }();
        const auto y = [&] {
            if constexpr (i + 1 == Network::block_count) return logits;
            else return batch_view<T, typename block::output>(buffer(i % 2), batch);
        }();
        block::forward(inference, values.template block_values<i>(), values.template block_state<i>(), x, y,
                       block_workspace);
    });
}

// The same with a workspace of per-thread memory, which grows once to the
// largest batch seen (so a steady state allocates nothing).
template <network_parameters_like Parameters>
void predict(const Parameters& parameters,
             const_batch<typename Parameters::value_type, typename Parameters::network_type::input> images,
             batch_view<typename Parameters::value_type, typename Parameters::network_type::output> logits)
{
    using Network = typename Parameters::network_type;
    using T = typename Parameters::value_type;
    const std::size_t bytes = Network::template inference_workspace_bytes<T>(images.batch());
    std::byte* workspace = kernels::thread_scratch<detail::predict_workspace_tag, std::byte>(bytes);
    predict(parameters, images, logits, std::span<std::byte>(workspace, bytes));
}

// The same on tensors (an xtensor container, an xt::adapt view of the
// caller's memory: see tensor_batch.hpp): images of N x C x H x W, logits of
// N x classes, each checked against the network's shapes.
template <network_parameters_like Parameters, tensor_like Images, tensor_like Logits>
void predict(const Parameters& parameters, const Images& images, Logits& logits)
{
    using Network = typename Parameters::network_type;
    using T = typename Parameters::value_type;
    const auto x = as_batch<typename Network::input>(images, "predict: images");
    const auto y = as_batch<typename Network::output>(logits, "predict: logits");
    static_assert(std::is_same_v<typename decltype(y)::element_type, T>,
                  "predict writes logits of the parameters' type.");
    if (y.batch() != x.batch()) {
        raise_error(error_kind::invalid_argument, "predict: logits for " + std::to_string(y.batch()) +
                                                      " examples, images of " + std::to_string(x.batch()) + ".");
    }
    predict(parameters, x, y);
}

// The same on pointers: images holds batch * Network::input::size values
// (NCHW), logits batch * Network::output::size; with or without the
// caller's workspace.
template <network_parameters_like Parameters>
void predict(const Parameters& parameters, std::size_t batch, const typename Parameters::value_type* images,
             typename Parameters::value_type* logits)
{
    using Network = typename Parameters::network_type;
    using T = typename Parameters::value_type;
    predict(parameters, batch_view<const T, typename Network::input>(images, batch),
            batch_view<T, typename Network::output>(logits, batch));
}
template <network_parameters_like Parameters>
void predict(const Parameters& parameters, std::size_t batch, const typename Parameters::value_type* images,
             typename Parameters::value_type* logits, std::span<std::byte> workspace)
{
    using Network = typename Parameters::network_type;
    using T = typename Parameters::value_type;
    predict(parameters, batch_view<const T, typename Network::input>(images, batch),
            batch_view<T, typename Network::output>(logits, batch), workspace);
}

} // namespace petra
