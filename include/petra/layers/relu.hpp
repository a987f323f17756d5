// Rectified linear unit, max(x, 0) element by element, on any shape.
#pragma once

#include <cstddef>
#include <span>

#include <petra/kernels/elementwise.hpp>
#include <petra/layers/layer.hpp>

namespace petra {

struct relu {
    template <class Input>
    struct bind : parameter_free {
        using unbound = relu;
        using input = Input;
        using output = Input;
        static constexpr std::size_t forward_flops = Input::size;
        static constexpr std::size_t backward_flops = Input::size;

        template <forward_pass Pass, class T>
        static void forward(Pass, parameters_view<T, 0>, state_view<Pass, T, 0>, const_batch<T, input> x,
                            batch_view<T, output> y, std::span<T>)
        {
            kernels::relu_forward(x.size(), x.data(), y.data());
        }

        template <class T>
        static void backward(parameters_view<T, 0>, const_batch<T, input> x, const_batch<T, output> grad_y,
                             batch_view<T, input> grad_x, std::span<T, 0>, std::span<T>)
        {
            if (grad_x) kernels::relu_backward(x.size(), x.data(), grad_y.data(), grad_x.data());
        }
    };
};

} // namespace petra
