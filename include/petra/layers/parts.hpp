// What a layer or block made of parts shares (floor 3): the parts'
// parameters and state placed end to end, and each part's share of them.
#pragma once

#include <array>
#include <cstddef>
#include <random>
#include <span>
#include <type_traits>

#include <petra/layers/layer.hpp>
#include <petra/type_list.hpp>

namespace petra {

namespace detail {

// offsets[i] = sum of sizes[0 .. i), offsets[N] = the total.
template <std::size_t N>
constexpr std::array<std::size_t, N + 1> prefix_sums(const std::array<std::size_t, N>& sizes)
{
    std::array<std::size_t, N + 1> offsets{};
    for (std::size_t i = 0; i < N; ++i) offsets[i + 1] = offsets[i] + sizes[i];
    return offsets;
}

} // namespace detail

// Base of a bound layer or block made of the bound layers Functions... (a
// chain's layers, a coupling's functions): its parameters and its state are
// theirs, in that order, end to end, and so are its initialisation and its
// weight mask; parameters_of<K> and state_of<K> give part K's share of an
// array laid out like its parameters or its state.
template <class... Functions>
struct made_of {
    static constexpr auto parameter_offsets =
        detail::prefix_sums<sizeof...(Functions)>({Functions::parameter_count...});
    static constexpr auto state_offsets = detail::prefix_sums<sizeof...(Functions)>({Functions::state_count...});
    static constexpr std::size_t parameter_count = parameter_offsets.back();
    static constexpr std::size_t state_count = state_offsets.back();

    template <std::size_t K>
    using function_at = type_at<K, std::remove_const_t<decltype(type_list<Functions...>)>>;

    // Part K's share of an array laid out like the parameters (or the
    // state), as a span of static extent, const or not as given.
    template <std::size_t K, class T, std::size_t Count>
    static constexpr auto parameters_of(std::span<T, Count> all)
    {
        return all.template subspan<parameter_offsets[K], function_at<K>::parameter_count>();
    }
    template <std::size_t K, class T, std::size_t Count>
    static constexpr auto state_of(std::span<T, Count> all)
    {
        return all.template subspan<state_offsets[K], function_at<K>::state_count>();
    }

    template <class T>
    static void initialize(std::span<T, parameter_count> parameters, std::span<T, state_count> state,
                           std::mt19937_64& generator)
    {
        for_each_index<sizeof...(Functions)>(
            [&](auto k) { function_at<k>::initialize(parameters_of<k>(parameters), state_of<k>(state), generator); });
    }

    template <class T>
    static void mark_weights(std::span<T, parameter_count> mask)
    {
        for_each_index<sizeof...(Functions)>(
            [&](auto k) { petra::mark_weights<function_at<k>, T>(parameters_of<k>(mask)); });
    }

    // Kernel scratch (layer.hpp): the parts' own, one after another;
    // input_gradient goes to each part's backward. A chain states its own
    // (its gradient buffers besides).
    template <class T>
    static constexpr kernels::scratch_demand forward_scratch(std::size_t batch, precision arithmetic = precision::fp32)
    {
        kernels::scratch_demand demand;
        (demand.merge(forward_scratch_of<Functions, T>(batch, arithmetic)), ...);
        return demand;
    }
    template <class T>
    static constexpr kernels::scratch_demand backward_scratch(std::size_t batch, bool input_gradient,
                                                              precision arithmetic = precision::fp32)
    {
        kernels::scratch_demand demand;
        (demand.merge(backward_scratch_of<Functions, T>(batch, input_gradient, arithmetic)), ...);
        return demand;
    }
};

} // namespace petra
