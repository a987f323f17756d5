// The stem: the layer F (usually a chain) applied to the image, its 2C output
// channels split into a pair of halves of C channels. Not reversible: it keeps
// its input and recomputes from it (see block.hpp).
#pragma once

#include <cstddef>
#include <random>

#include <petra/blocks/block.hpp>
#include <petra/layers/layer.hpp>

namespace petra {

template <class F>
struct stem : block_kind {
    template <class Input>
    static constexpr bool accepts = layer_accepts<F, Input>();

    template <class Input>
    struct bind : made_of<layer_for<F, Input>> {
        using function = layer_for<F, Input>;
        using whole = typename function::output;
        static_assert(whole::channels % 2 == 0, "stem: F must give an even number of channels to split in halves.");
        using input = Input;
        using output = halves<shape<whole::channels / 2, whole::height, whole::width>>;
        static constexpr bool reversible = false;
        // backward accepts a null grad_x (the network's input is data).
        static constexpr bool input_gradient_optional = true;
        static constexpr std::size_t forward_flops = function::forward_flops;
        static constexpr std::size_t backward_flops = function::backward_flops;

        // F's output (or its gradient) in NCHW, then F's cache.
        static constexpr std::size_t workspace_size(std::size_t batch)
        {
            return batch * whole::size + function::cache_size(batch);
        }

        template <class T>
        static void forward(pass mode, std::size_t batch, const T* parameters, T* state, const T* x, T* y,
                            T* workspace)
        {
            T* value = workspace;
            function::forward(mode, batch, parameters, state, x, value, workspace + batch * whole::size);
            split_into_halves(batch, output::half::size, static_cast<const T*>(value), y);
        }

        template <class T>
        static void backward(std::size_t batch, const T* parameters, T* /*state*/, const T* x, const T* grad_y,
                             T* grad_x, T* grad_parameters, T* workspace)
        {
            T* gradient = workspace; // where forward kept F's output, no longer needed
            T* cache = workspace + batch * whole::size;
            merge_halves(batch, output::half::size, grad_y, gradient);
            function::backward(batch, parameters, x, cache, static_cast<const T*>(gradient), grad_x,
                               grad_parameters);
        }
    };
};

} // namespace petra
