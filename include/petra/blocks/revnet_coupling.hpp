// The two-function reversible block of RevNet:
//   forward:  y1 = x1 + F(x2),  y2 = x2 + G(y1)
//   inverse:  x2 = y2 - G(y1),  x1 = y1 - F(x2)
// where F and G are layers (usually chains) that keep the shape of one half.
#pragma once

#include <algorithm>
#include <cstddef>
#include <random>
#include <type_traits>

#include <petra/blocks/block.hpp>
#include <petra/kernels/elementwise.hpp>
#include <petra/layers/layer.hpp>

namespace petra {

template <class F, class G>
struct revnet_coupling {
    template <class Input>
    struct bind : made_of<layer_for<F, typename half_of<Input>::type>, layer_for<G, typename half_of<Input>::type>> {
        using half = typename half_of<Input>::type;
        using first = layer_for<F, half>;
        using second = layer_for<G, half>;
        static_assert(std::is_same_v<typename first::output, half>,
                      "revnet_coupling: F must give an output of the same shape as its input.");
        static_assert(std::is_same_v<typename second::output, half>,
                      "revnet_coupling: G must give an output of the same shape as its input.");
        using input = Input;
        using output = Input;
        static constexpr bool reversible = true;
        static constexpr std::size_t forward_flops = first::forward_flops + second::forward_flops + 2 * half::size;
        static constexpr std::size_t backward_flops = forward_flops + first::backward_flops +
                                                      second::backward_flops + 4 * half::size;

        // A function value for the batch, then the cache of F or of G (used in turn).
        static constexpr std::size_t workspace_size(std::size_t batch)
        {
            return batch * half::size + std::max(first::cache_size(batch), second::cache_size(batch));
        }

        template <class T>
        static void forward(pass mode, std::size_t batch, const T* parameters, T* state, const T* x, T* y,
                            T* workspace)
        {
            const std::size_t count = batch * half::size;
            T* cache = workspace + count;
            first::forward(mode, batch, parameters, state, x + count, y, cache);
            kernels::add(count, static_cast<const T*>(y), x, y); // y1 = x1 + F(x2)
            second::forward(mode, batch, parameters + first::parameter_count, state + first::state_count,
                            static_cast<const T*>(y), y + count, cache);
            kernels::add(count, static_cast<const T*>(y + count), x + count, y + count); // y2 = x2 + G(y1)
        }

        template <class T>
        static void inverse(std::size_t batch, const T* parameters, T* state, const T* y, T* x, T* workspace)
        {
            const std::size_t count = batch * half::size;
            T* value = workspace;
            T* cache = workspace + count;
            second::forward(pass::recomputation, batch, parameters + first::parameter_count,
                            state + first::state_count, y, value, cache);
            kernels::subtract(count, y + count, static_cast<const T*>(value), x + count); // x2 = y2 - G(y1)
            first::forward(pass::recomputation, batch, parameters, state, static_cast<const T*>(x + count), value,
                           cache);
            kernels::subtract(count, y, static_cast<const T*>(value), x); // x1 = y1 - F(x2)
        }

        // G, then F, each evaluated once; with g1, g2 the gradients of y1, y2:
        //   dL/dx1 = g1 + J_G(y1)^T g2,   dL/dx2 = g2 + J_F(x2)^T dL/dx1.
        template <class T>
        static void reconstruct_backward(std::size_t batch, const T* parameters, T* state, const T* y,
                                         const T* grad_y, T* x, T* grad_x, T* grad_parameters, T* workspace)
        {
            const std::size_t count = batch * half::size;
            T* value = workspace;
            T* cache = workspace + count;
            second::forward(pass::recomputation, batch, parameters + first::parameter_count,
                            state + first::state_count, y, value, cache);
            kernels::subtract(count, y + count, static_cast<const T*>(value), x + count);
            second::backward(batch, parameters + first::parameter_count, y, cache, grad_y + count, grad_x,
                             grad_parameters + first::parameter_count);
            kernels::add(count, static_cast<const T*>(grad_x), grad_y, grad_x);

            first::forward(pass::recomputation, batch, parameters, state, static_cast<const T*>(x + count), value,
                           cache);
            kernels::subtract(count, y, static_cast<const T*>(value), x);
            first::backward(batch, parameters, static_cast<const T*>(x + count), cache, static_cast<const T*>(grad_x),
                            grad_x + count, grad_parameters);
            kernels::add(count, static_cast<const T*>(grad_x + count), grad_y + count, grad_x + count);
        }
    };
};

} // namespace petra
