// Rectified linear unit, max(x, 0) element by element, on any shape.
#pragma once

#include <cstddef>
#include <random>

#include <petra/kernels/elementwise.hpp>
#include <petra/layers/layer.hpp>

namespace petra {

struct relu {
    template <class Input>
    struct bind {
        using input = Input;
        using output = Input;
        static constexpr std::size_t parameter_count = 0;
        static constexpr std::size_t state_count = 0;
        static constexpr std::size_t cache_size(std::size_t /*batch*/) { return 0; }
        static constexpr std::size_t forward_flops = Input::size;
        static constexpr std::size_t backward_flops = Input::size;

        template <class T>
        static void initialize(T*, T*, std::mt19937_64&)
        {
        }

        template <class T>
        static void forward(pass, std::size_t batch, const T*, T*, const T* x, T* y, T*)
        {
            kernels::relu_forward(batch * Input::size, x, y);
        }

        template <class T>
        static void backward(std::size_t batch, const T*, const T* x, T*, const T* grad_y, T* grad_x, T*)
        {
            kernels::relu_backward(batch * Input::size, x, grad_y, grad_x);
        }
    };
};

} // namespace petra
