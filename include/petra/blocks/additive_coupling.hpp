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
struct additive_coupling : block_kind {
    template <class Input>
    static constexpr bool accepts = halves_accepted_by<Input, F>();

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
        static constexpr std::size_t backward_flops = function::backward_flops + half::size;

        // F's cache.
        static constexpr std::size_t workspace_size(std::size_t batch) { return function::cache_size(batch); }

        template <class T>
        static void forward(pass mode, std::size_t batch, const T* parameters, T* state, const T* x, T* y,
                            T* workspace)
        {
            const std::size_t count = batch * half::size;
            // y = x~ + F(x), F written straight into the first output half.
            function::forward(mode, batch, parameters, state, x, y, workspace);
            kernels::add(count, static_cast<const T*>(y), x + count, y);
            std::copy(x, x + count, y + count);
        }

        template <class T>
        static void inverse(std::size_t batch, const T* parameters, T* state, const T* y, T* x, T* workspace)
        {
            const std::size_t count = batch * half::size;
            std::copy(y + count, y + 2 * count, x);
            // x~ = y - F(y~), F written straight into the second input half.
            function::forward(pass::recomputation, batch, parameters, state, static_cast<const T*>(x), x + count,
                              workspace);
            kernels::subtract(count, y, static_cast<const T*>(x + count), x + count);
        }

        // With y = x~ + F(x) and y~ = x: dL/dx~ = dL/dy and
        // dL/dx = dL/dy~ + J_F(x)^T dL/dy.
        template <class T>
        static void backward(std::size_t batch, const T* parameters, T* /*state*/, const T* x, const T* grad_y,
                             T* grad_x, T* grad_parameters, T* workspace)
        {
            const std::size_t count = batch * half::size;
            function::backward(batch, parameters, x, workspace, grad_y, grad_x, grad_parameters);
            kernels::add(count, static_cast<const T*>(grad_x), grad_y + count, grad_x);
            std::copy(grad_y, grad_y + count, grad_x + count);
        }
    };
};

} // namespace petra
