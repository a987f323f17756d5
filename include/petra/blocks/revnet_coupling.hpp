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
struct revnet_coupling : block_kind {
    template <class Input>
    static constexpr bool accepts = halves_accepted_by<Input, F, G>();

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
        static constexpr std::size_t backward_flops = first::backward_flops + second::backward_flops + 2 * half::size;

        // y1 (G's input, which backward needs), F's cache, G's cache.
        static constexpr std::size_t workspace_size(std::size_t batch)
        {
            return batch * half::size + first::cache_size(batch) + second::cache_size(batch);
        }

        template <class T>
        static void forward(pass mode, std::size_t batch, const T* parameters, T* state, const T* x, T* y,
                            T* workspace)
        {
            const std::size_t count = batch * half::size;
            const layout<T> at{workspace, batch};
            first::forward(mode, batch, parameters, state, x + count, y, at.first_cache());
            kernels::add(count, static_cast<const T*>(y), x, y); // y1 = x1 + F(x2)
            second::forward(mode, batch, parameters + first::parameter_count, state + first::state_count,
                            static_cast<const T*>(y), y + count, at.second_cache());
            kernels::add(count, static_cast<const T*>(y + count), x + count, y + count); // y2 = x2 + G(y1)
            std::copy(y, y + count, at.first_output());
        }

        // Each function's value is written straight into the input half it
        // is subtracted from.
        template <class T>
        static void inverse(std::size_t batch, const T* parameters, T* state, const T* y, T* x, T* workspace)
        {
            const std::size_t count = batch * half::size;
            const layout<T> at{workspace, batch};
            second::forward(pass::recomputation, batch, parameters + first::parameter_count,
                            state + first::state_count, y, x + count, at.second_cache());
            kernels::subtract(count, y + count, static_cast<const T*>(x + count), x + count); // x2 = y2 - G(y1)
            first::forward(pass::recomputation, batch, parameters, state, static_cast<const T*>(x + count), x,
                           at.first_cache());
            kernels::subtract(count, y, static_cast<const T*>(x), x); // x1 = y1 - F(x2)
            std::copy(y, y + count, at.first_output());
        }

        // With g1, g2 the gradients of y1, y2:
        //   dL/dx1 = g1 + J_G(y1)^T g2,   dL/dx2 = g2 + J_F(x2)^T dL/dx1.
        template <class T>
        static void backward(std::size_t batch, const T* parameters, T* /*state*/, const T* x, const T* grad_y,
                             T* grad_x, T* grad_parameters, T* workspace)
        {
            const std::size_t count = batch * half::size;
            const layout<T> at{workspace, batch};
            second::backward(batch, parameters + first::parameter_count, static_cast<const T*>(at.first_output()),
                             at.second_cache(), grad_y + count, grad_x, grad_parameters + first::parameter_count);
            kernels::add(count, static_cast<const T*>(grad_x), grad_y, grad_x);
            first::backward(batch, parameters, x + count, at.first_cache(), static_cast<const T*>(grad_x),
                            grad_x + count, grad_parameters);
            kernels::add(count, static_cast<const T*>(grad_x + count), grad_y + count, grad_x + count);
        }

    private:
        template <class T>
        struct layout {
            T* base;
            std::size_t batch;
            T* first_output() const { return base; }
            T* first_cache() const { return base + batch * half::size; }
            T* second_cache() const { return first_cache() + first::cache_size(batch); }
        };
    };
};

} // namespace petra
