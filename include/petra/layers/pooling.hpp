// Global average pooling: the mean of each channel over its pixels, from
// shape<C, H, W> to shape<C>.
#pragma once

#include <algorithm>
#include <cstddef>

#include <petra/kernels/reduction.hpp>
#include <petra/layers/layer.hpp>

namespace petra {

struct global_average_pool {
    template <class Input>
    struct bind : parameter_free {
        using input = Input;
        using output = shape<Input::channels>;
        static constexpr std::size_t forward_flops = Input::size;
        static constexpr std::size_t backward_flops = Input::size;

        template <class T>
        static void forward(pass, std::size_t batch, const T*, T*, const T* x, T* y, T*)
        {
            // Each (example, channel) row is one "channel" of a batch of one.
            kernels::channel_sum(std::size_t(1), batch * Input::channels, Input::pixels, x, y);
            const T scale = T(1) / T(Input::pixels);
            for (std::size_t i = 0; i < batch * Input::channels; ++i) y[i] *= scale;
        }

        template <class T>
        static void backward(std::size_t batch, const T*, const T*, T*, const T* grad_y, T* grad_x, T*)
        {
            if (grad_x == nullptr) return;
            const T scale = T(1) / T(Input::pixels);
            for (std::size_t i = 0; i < batch * Input::channels; ++i) {
                std::fill(grad_x + i * Input::pixels, grad_x + (i + 1) * Input::pixels, scale * grad_y[i]);
            }
        }
    };
};
} // namespace petra
