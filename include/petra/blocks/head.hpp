// The head: the two halves concatenated along the channels (back to one NCHW
// tensor of 2C channels), then the layer F (usually pooling and a dense layer)
// to the logits. The loss is applied to the head's output by the trainer. Not
// reversible: it keeps its input and recomputes from it (see block.hpp).
#pragma once

#include <cstddef>
#include <random>

#include <petra/blocks/block.hpp>
#include <petra/layers/chain.hpp>
#include <petra/layers/dense.hpp>
#include <petra/layers/layer.hpp>
#include <petra/layers/pooling.hpp>

namespace petra {

template <class F>
struct head : block_kind {
    template <class Input>
    static constexpr bool accepts = [] {
        if constexpr (is_halves<Input>::value) {
            return layer_accepts<F, concatenated_halves<Input>>();
        } else {
            return false;
        }
    }();

    template <class Input>
    struct bind : made_of<layer_for<F, concatenated_halves<Input>>> {
        using half = typename half_of<Input>::type;
        using whole = concatenated_halves<Input>;
        using function = layer_for<F, whole>;
        using input = Input;
        using output = typename function::output;
        static constexpr bool reversible = false;
        static constexpr std::size_t forward_flops = function::forward_flops;
        static constexpr std::size_t backward_flops = function::backward_flops;

        // The concatenated input, its gradient, then F's cache.
        static constexpr std::size_t workspace_size(std::size_t batch)
        {
            return 2 * batch * whole::size + function::cache_size(batch);
        }

        template <class T>
        static void forward(pass mode, std::size_t batch, const T* parameters, T* state, const T* x, T* y,
                            T* workspace)
        {
            T* concatenated = workspace;
            merge_halves(batch, half::size, x, concatenated);
            function::forward(mode, batch, parameters, state, static_cast<const T*>(concatenated), y,
                              workspace + 2 * batch * whole::size);
        }

        template <class T>
        static void backward(std::size_t batch, const T* parameters, T* /*state*/, const T* /*x*/,
                             const T* grad_y, T* grad_x, T* grad_parameters, T* workspace)
        {
            T* concatenated = workspace;
            T* gradient = workspace + batch * whole::size;
            T* cache = gradient + batch * whole::size;
            function::backward(batch, parameters, static_cast<const T*>(concatenated), cache, grad_y, gradient,
                               grad_parameters);
            split_into_halves(batch, half::size, static_cast<const T*>(gradient), grad_x);
        }
    };
};

// The reference network's head: global average pooling of the 2 C channels,
// then a dense layer to Classes logits.
template <std::size_t Channels, std::size_t Classes>
using classifier_head = head<chain<global_average_pool, dense<Channels, Classes>>>;

} // namespace petra
