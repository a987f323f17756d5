// chain<Layer...>: layers applied one after another, itself a layer. Binding
// it to an input binds each layer to the output of the one before, so a
// residual function reads like its diagram:
//
//   chain<conv2d<16, 16>, batch_norm<16>, relu, conv2d<16, 16>, batch_norm<16>>
//
// Its counts and FLOPs are sums over the pack, its parameters and state are
// its layers' arrays placed end to end, and forward and backward are folds
// over the layers' indices; nothing is written per network.
//
// Cache of a bound chain for a batch (the memory forward leaves to backward):
// the outputs of every layer but the last, then each layer's own cache: what
// exact backprop must store, nothing more. The gradients between layers live
// only during backward, in two buffers of per-thread scratch (one pair per
// chain type, grown once to the largest batch, so a steady state allocates
// nothing).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <random>
#include <tuple>
#include <utility>

#include <petra/kernels/simd.hpp>
#include <petra/layers/layer.hpp>

namespace petra {

namespace detail {

template <class... Types>
struct type_list {};

// Binds Layers... in order, starting from Input: type_list<Bound...>. The
// recursion is as deep as the chain is long (a handful of layers).
template <class Input, class... Layers>
struct bind_in_order {
    using type = type_list<>;
};

template <class Input, class First, class... Rest>
struct bind_in_order<Input, First, Rest...> {
    using first = layer_for<First, Input>;
    template <class... Bound>
    static type_list<first, Bound...> prepend(type_list<Bound...>);
    using type = decltype(prepend(typename bind_in_order<typename first::output, Rest...>::type{}));
};

// offsets[i] = sum of sizes[0 .. i), offsets[N] = the total.
template <std::size_t N>
constexpr std::array<std::size_t, N + 1> prefix_sums(const std::array<std::size_t, N>& sizes)
{
    std::array<std::size_t, N + 1> offsets{};
    for (std::size_t i = 0; i < N; ++i) offsets[i + 1] = offsets[i] + sizes[i];
    return offsets;
}

template <class... Bound>
struct bound_chain {
    static constexpr std::size_t length = sizeof...(Bound);
    template <std::size_t I>
    using layer = std::tuple_element_t<I, std::tuple<Bound...>>;

    using input = typename layer<0>::input;
    using output = typename layer<length - 1>::output;

    static constexpr auto parameter_offsets = prefix_sums<length>({Bound::parameter_count...});
    static constexpr auto state_offsets = prefix_sums<length>({Bound::state_count...});
    static constexpr std::size_t parameter_count = parameter_offsets[length];
    static constexpr std::size_t state_count = state_offsets[length];
    static constexpr std::size_t forward_flops = (Bound::forward_flops + ...);
    static constexpr std::size_t backward_flops = (Bound::backward_flops + ...);

    // Offsets, per example, of the outputs kept between layers (layer i's
    // output at intermediate_offsets[i], for i < length - 1).
    static constexpr std::array<std::size_t, length> output_sizes{Bound::output::size...};
    static constexpr auto intermediate_offsets = prefix_sums<length>(output_sizes);
    static constexpr std::size_t intermediate_size = intermediate_offsets[length - 1];
    static constexpr std::size_t largest_intermediate =
        length == 1 ? 0 : *std::max_element(output_sizes.begin(), output_sizes.end() - 1);

    static constexpr std::size_t cache_size(std::size_t batch)
    {
        return batch * intermediate_size + (Bound::cache_size(batch) + ...);
    }

    template <class T>
    static void initialize(T* parameters, T* state, std::mt19937_64& generator)
    {
        [&]<std::size_t... I>(std::index_sequence<I...>) {
            (layer<I>::initialize(parameters + parameter_offsets[I], state + state_offsets[I], generator), ...);
        }(std::make_index_sequence<length>{});
    }

    template <class T>
    static void mark_weights(T* mask)
    {
        [&]<std::size_t... I>(std::index_sequence<I...>) {
            (petra::mark_weights<layer<I>>(mask + parameter_offsets[I]), ...);
        }(std::make_index_sequence<length>{});
    }

    template <class T>
    static void forward(pass mode, std::size_t batch, const T* parameters, T* state, const T* x, T* y, T* cache)
    {
        const cache_layout<T> at{cache, batch, nullptr};
        [&]<std::size_t... I>(std::index_sequence<I...>) {
            (layer<I>::forward(mode, batch, parameters + parameter_offsets[I], state + state_offsets[I],
                               I == 0 ? x : at.intermediate(I - 1), I + 1 == length ? y : at.intermediate(I),
                               at.layer_cache(I)),
             ...);
        }(std::make_index_sequence<length>{});
    }

    // Layers in reverse order; layer i writes the gradient of its input to
    // gradient buffer i % 2, which layer i - 1 reads.
    template <class T>
    static void backward(std::size_t batch, const T* parameters, const T* x, T* cache, const T* grad_y,
                         T* grad_x, T* grad_parameters)
    {
        const cache_layout<T> at{cache, batch,
                                 length == 1 ? nullptr
                                             : kernels::thread_scratch<bound_chain, T>(2 * batch * largest_intermediate)};
        [&]<std::size_t... R>(std::index_sequence<R...>) {
            (backward_step<length - 1 - R>(batch, parameters, x, at, grad_y, grad_x, grad_parameters), ...);
        }(std::make_index_sequence<length>{});
    }

private:
    template <class T>
    struct cache_layout {
        T* base;
        std::size_t batch;
        T* gradients; // two buffers of batch * largest_intermediate values

        T* intermediate(std::size_t i) const { return base + batch * intermediate_offsets[i]; }
        T* layer_cache(std::size_t i) const
        {
            std::size_t offset = batch * intermediate_size;
            const std::array<std::size_t, length> sizes{Bound::cache_size(batch)...};
            for (std::size_t j = 0; j < i; ++j) offset += sizes[j];
            return base + offset;
        }
        T* gradient(std::size_t i) const { return gradients + (i % 2) * batch * largest_intermediate; }
    };

    template <std::size_t I, class T>
    static void backward_step(std::size_t batch, const T* parameters, const T* x, const cache_layout<T>& at,
                              const T* grad_y, T* grad_x, T* grad_parameters)
    {
        layer<I>::backward(batch, parameters + parameter_offsets[I], I == 0 ? x : at.intermediate(I - 1),
                           at.layer_cache(I), I + 1 == length ? grad_y : at.gradient(I + 1),
                           I == 0 ? grad_x : at.gradient(I), grad_parameters + parameter_offsets[I]);
    }
};

// Whether each layer accepts the output of the one before, the first Input.
template <class Input, class First, class... Rest>
constexpr bool chain_accepts()
{
    if constexpr (!layer_accepts<First, Input>()) {
        return false;
    } else if constexpr (sizeof...(Rest) == 0) {
        return true;
    } else {
        return chain_accepts<typename layer_for<First, Input>::output, Rest...>();
    }
}

template <class List>
struct bound_chain_of;
template <class... Bound>
struct bound_chain_of<type_list<Bound...>> {
    using type = bound_chain<Bound...>;
};

} // namespace detail

template <class... Layers>
struct chain {
    static_assert(sizeof...(Layers) > 0, "A chain needs at least one layer.");

    template <class Input>
    static constexpr bool accepts = detail::chain_accepts<Input, Layers...>();

    template <class Input>
    using bind = typename detail::bound_chain_of<typename detail::bind_in_order<Input, Layers...>::type>::type;
};

} // namespace petra
