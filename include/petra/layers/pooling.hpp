// Global average pooling: the mean of each channel over its pixels, from
// shape<C, H, W> to shape<C>.
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>

#include <petra/kernels/reduction.hpp>
#include <petra/layers/layer.hpp>

namespace petra {

struct global_average_pool {
    template <class Input>
    struct bind : parameter_free {
        using unbound = global_average_pool;
        using input = Input;
        using output = shape<Input::channels>;
        static constexpr std::size_t forward_flops = Input::size;
        static constexpr std::size_t backward_flops = Input::size;

        template <forward_pass Pass, class T>
        static void forward(Pass, parameters_view<T, 0>, state_view<Pass, T, 0>, const_batch<T, input> x,
                            batch_view<T, output> y, std::span<T>)
        {
            // Each (example, channel) row is one "channel" of a batch of one.
            kernels::channel_sum(std::size_t(1), y.size(), Input::pixels, x.data(), y.data());
            const T scale = T(1) / T(Input::pixels);
            for (T& value : y) value *= scale;
        }

        template <class T>
        static void backward(parameters_view<T, 0>, const_batch<T, input>, const_batch<T, output> grad_y,
                             batch_view<T, input> grad_x, std::span<T, 0>, std::span<T>)
        {
            if (!grad_x) return;
            const T scale = T(1) / T(Input::pixels);
            for (std::size_t i = 0; i < grad_y.size(); ++i) {
                std::fill_n(grad_x.data() + i * Input::pixels, Input::pixels, scale * grad_y.data()[i]);
            }
        }
    };
};
} // namespace petra
