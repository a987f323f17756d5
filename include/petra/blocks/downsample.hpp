// Downsampling between resolutions, on a pair of halves:
//   y = F(x),   y~ = y + G(x~)
// with F and G layers (usually chains) that map one half to the same new
// shape, e.g. F = conv3x3 stride 2, batch norm, ReLU and G = conv1x1 stride 2,
// batch norm (downsampling<C, 2C> below, the reference network's). Not
// reversible: it keeps its input and recomputes from it (see block.hpp).
#pragma once

#include <cstddef>
#include <random>
#include <type_traits>

#include <petra/blocks/block.hpp>
#include <petra/kernels/elementwise.hpp>
#include <petra/layers/batch_norm.hpp>
#include <petra/layers/chain.hpp>
#include <petra/layers/conv2d.hpp>
#include <petra/layers/layer.hpp>
#include <petra/layers/relu.hpp>

namespace petra {

template <class F, class G>
struct downsample : block_kind {
    template <class Input>
    static constexpr bool accepts = halves_accepted_by<Input, F, G>();

    template <class Input>
    struct bind : made_of<layer_for<F, typename half_of<Input>::type>, layer_for<G, typename half_of<Input>::type>> {
        using first = layer_for<F, typename half_of<Input>::type>;
        using second = layer_for<G, typename half_of<Input>::type>;
        static_assert(std::is_same_v<typename first::output, typename second::output>,
                      "downsample: F and G must give outputs of the same shape.");
        using input = Input;
        using output = halves<typename first::output>;
        static constexpr bool reversible = false;
        static constexpr std::size_t forward_flops =
            first::forward_flops + second::forward_flops + output::half::size;
        static constexpr std::size_t backward_flops =
            first::backward_flops + second::backward_flops + output::half::size;

        // A gradient of one output half, then F's cache, then G's.
        static constexpr std::size_t workspace_size(std::size_t batch)
        {
            return batch * output::half::size + first::cache_size(batch) + second::cache_size(batch);
        }

        template <class T>
        static void forward(pass mode, std::size_t batch, const T* parameters, T* state, const T* x, T* y,
                            T* workspace)
        {
            const std::size_t in_count = batch * input::half::size, out_count = batch * output::half::size;
            T* first_cache = workspace + out_count;
            T* second_cache = first_cache + first::cache_size(batch);
            first::forward(mode, batch, parameters, state, x, y, first_cache);
            second::forward(mode, batch, parameters + first::parameter_count, state + first::state_count,
                            x + in_count, y + out_count, second_cache);
            kernels::add(out_count, static_cast<const T*>(y + out_count), static_cast<const T*>(y), y + out_count);
        }

        // y~ depends on y, so F receives dL/dy + dL/dy~; G receives dL/dy~.
        template <class T>
        static void backward(std::size_t batch, const T* parameters, T* /*state*/, const T* x, const T* grad_y,
                             T* grad_x, T* grad_parameters, T* workspace)
        {
            const std::size_t in_count = batch * input::half::size, out_count = batch * output::half::size;
            T* gradient = workspace;
            T* first_cache = workspace + out_count;
            T* second_cache = first_cache + first::cache_size(batch);
            kernels::add(out_count, grad_y, grad_y + out_count, gradient);
            first::backward(batch, parameters, x, first_cache, static_cast<const T*>(gradient), grad_x,
                            grad_parameters);
            second::backward(batch, parameters + first::parameter_count, x + in_count, second_cache,
                             grad_y + out_count, grad_x + in_count, grad_parameters + first::parameter_count);
        }
    };
};

// The reference network's downsampling from C to 2 C channels per half:
// F = conv3x3 stride 2, batch norm, ReLU; G = conv1x1 stride 2, batch norm.
template <std::size_t C, std::size_t Out = 2 * C>
using downsampling = downsample<chain<conv2d<C, Out, 3, 2>, batch_norm<Out>, relu>,
                                chain<conv2d<C, Out, 1, 2, 0>, batch_norm<Out>>>;

} // namespace petra
