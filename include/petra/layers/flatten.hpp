// Flattening layer.
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>

#include <petra/layers/layer.hpp>

namespace petra {

// Reinterprets shape<C, H, W> as shape<C * H * W>: the values stay in their
// order (a copy, since a layer's output has memory of its own).
struct flatten {
    template <class Input>
    struct bind : parameter_free {
        using unbound = flatten;
        using input = Input;
        using output = shape<Input::size>;
        static constexpr std::size_t forward_flops = 0;
        static constexpr std::size_t backward_flops = 0;

        template <forward_pass Pass, class T>
        static void forward(Pass, parameters_view<T, 0>, state_view<Pass, T, 0>, const_batch<T, input> x,
                            batch_view<T, output> y, std::span<T>)
        {
            std::copy_n(x.data(), x.size(), y.data());
        }

        template <class T>
        static void backward(parameters_view<T, 0>, const_batch<T, input>, const_batch<T, output> grad_y,
                             batch_view<T, input> grad_x, std::span<T, 0>, std::span<T>)
        {
            if (grad_x) std::copy_n(grad_y.data(), grad_y.size(), grad_x.data());
        }
    };
};

} // namespace petra
