// Flattening layer.
#pragma once

#include <algorithm>
#include <cstddef>

#include <petra/layers/layer.hpp>

namespace petra {

// Reinterprets shape<C, H, W> as shape<C * H * W>: the values stay where they are.
struct flatten {
    template <class Input>
    struct bind : parameter_free {
        using input = Input;
        using output = shape<Input::size>;
        static constexpr std::size_t forward_flops = 0;
        static constexpr std::size_t backward_flops = 0;

        template <class T>
        static void forward(pass, std::size_t batch, const T*, T*, const T* x, T* y, T*)
        {
            std::copy(x, x + batch * Input::size, y);
        }

        template <class T>
        static void backward(std::size_t batch, const T*, const T*, T*, const T* grad_y, T* grad_x, T*)
        {
            if (grad_x != nullptr) std::copy(grad_y, grad_y + batch * Input::size, grad_x);
        }
    };
};

} // namespace petra
