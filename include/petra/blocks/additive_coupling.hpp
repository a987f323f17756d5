// The additive coupling with swap, the reversible block of PETRA:
//   forward:  y = x~ + F(x),  y~ = x
//   inverse:  x = y~,         x~ = y - F(y~)
// where F is any layer (usually a chain) whose output shape equals its input
// shape, the shape of one half.
#pragma once

#include <algorithm>
#include <cstddef>
#include <random>
#include <type_traits>

#include <petra/blocks/block.hpp>
#include <petra/kernels/elementwise.hpp>
#include <petra/layers/layer.hpp>

namespace petra {

template <class F>
struct additive_coupling {
    template <class Input>
    struct bind : made_of<layer_for<F, typename half_of<Input>::type>> {
        using half = typename half_of<Input>::type;
        using function = layer_for<F, half>;
        static_assert(std::is_same_v<typename function::output, half>,
                      "additive_coupling: F must give an output of the same shape as its input.");
        using input = Input;
        using output = Input;
        static constexpr bool reversible = true;
        static constexpr std::size_t forward_flops = function::forward_flops + half::size;
        // Reconstruction (F once, a subtraction) and the backward of F.
        static constexpr std::size_t backward_flops =
            function::forward_flops + function::backward_flops + 2 * half::size;

        // F's value for the batch, then F's cache.
        static constexpr std::size_t workspace_size(std::size_t batch)
        {
            return batch * half::size + function::cache_size(batch);
        }

        template <class T>
        static void forward(pass mode, std::size_t batch, const T* parameters, T* state, const T* x, T* y,
                            T* workspace)
        {
            const std::size_t count = batch * half::size;
            const T* first = x;
            const T* second = x + count;
            // y = x~ + F(x), written straight into the first output half.
            function::forward(mode, batch, parameters, state, first, y, workspace + count);
            kernels::add(count, y, second, y);
            std::copy(first, first + count, y + count);
        }

        template <class T>
        static void inverse(std::size_t batch, const T* parameters, T* state, const T* y, T* x, T* workspace)
        {
            const std::size_t count = batch * half::size;
            T* value = workspace;
            std::copy(y + count, y + 2 * count, x);
            function::forward(pass::recomputation, batch, parameters, state, x, value, workspace + count);
            kernels::subtract(count, y, static_cast<const T*>(value), x + count); // x~ = y - F(y~)
        }

        // With x = y~ and x~ = y - F(x): dL/dx~ = dL/dy, and
        // dL/dx = dL/dy~ + J_F(x)^T dL/dy; F is evaluated once, and its
        // backward reuses the cache of that evaluation.
        template <class T>
        static void reconstruct_backward(std::size_t batch, const T* parameters, T* state, const T* y,
                                         const T* grad_y, T* x, T* grad_x, T* grad_parameters, T* workspace)
        {
            const std::size_t count = batch * half::size;
            T* value = workspace;
            T* cache = workspace + count;
            std::copy(y + count, y + 2 * count, x);
            function::forward(pass::recomputation, batch, parameters, state, x, value, cache);
            kernels::subtract(count, y, static_cast<const T*>(value), x + count);
            // grad_x (first half) = J_F^T grad_y, then + grad_y~.
            function::backward(batch, parameters, static_cast<const T*>(x), cache, grad_y, grad_x, grad_parameters);
            kernels::add(count, static_cast<const T*>(grad_x), grad_y + count, grad_x);
            std::copy(grad_y, grad_y + count, grad_x + count);
        }
    };
};

} // namespace petra
