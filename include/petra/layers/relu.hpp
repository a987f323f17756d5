// Rectified linear unit, max(x, 0) element by element, on any shape.
#pragma once

#include <cstddef>

#include <petra/kernels/elementwise.hpp>
#include <petra/layers/layer.hpp>

namespace petra {

struct relu {
    template <class Input>
    struct bind : parameter_free {
        using input = Input;
        using output = Input;
        static constexpr std::size_t forward_flops = Input::size;
        static constexpr std::size_t backward_flops = Input::size;

        template <class T>
        static void forward(pass, std::size_t batch, const T*, T*, const T* x, T* y, T*)
        {
            kernels::relu_forward(batch * Input::size, x, y);
        }

        template <class T>
        static void backward(std::size_t batch, const T*, const T* x, T*, const T* grad_y, T* grad_x, T*)
        {
            if (grad_x != nullptr) kernels::relu_backward(batch * Input::size, x, grad_y, grad_x);
        }
    };
};

} // namespace petra
