// Layers of a user's that break the layer contract (layers/layer.hpp) in the
// ways users break it, for the compile-fail cases: each is a per-channel
// scale, right but for one thing.
#pragma once

#include <cstddef>
#include <random>
#include <span>

#include <petra/petra.hpp>

namespace broken {

using namespace petra;

// What every variant shares: counts, initialisation and a correct forward.
template <class Input>
struct scale_base {
    using input = Input;
    using output = Input;
    static constexpr std::size_t parameter_count = Input::channels;
    static constexpr std::size_t state_count = 0;
    static constexpr std::size_t workspace_size(std::size_t) { return 0; }
    static constexpr std::size_t forward_flops = Input::size;

    template <class T>
    static void initialize(std::span<T, parameter_count> scale, std::span<T, 0>, std::mt19937_64&)
    {
        for (T& s : scale) s = T(1);
    }
};

template <class Input, class T>
void scale_forward(std::span<const T, Input::channels> scale, const T* x, T* y, std::size_t size)
{
    for (std::size_t i = 0; i < size; ++i) y[i] = scale[(i / Input::pixels) % Input::channels] * x[i];
}

// backward(x, grad_y, grad_x, parameters, grad_parameters, workspace): the
// parameters after the batches, not first.
struct swapped_backward {
    template <class Input>
    struct bind : scale_base<Input> {
        static constexpr std::size_t backward_flops = 2 * Input::size;
        template <forward_pass Pass, class T>
        static void forward(Pass, parameters_view<T, Input::channels> scale, state_view<Pass, T, 0>,
                            const_batch<T, Input> x, batch_view<T, Input> y, std::span<T>)
        {
            scale_forward<Input>(scale, x.data(), y.data(), x.size());
        }
        template <class T>
        static void backward(const_batch<T, Input>, const_batch<T, Input>, batch_view<T, Input>,
                             std::span<const T, Input::channels>, std::span<T, Input::channels>, std::span<T>)
        {
        }
    };
};

// Batches taken as std::span rather than batch views.
struct span_batches {
    template <class Input>
    struct bind : scale_base<Input> {
        static constexpr std::size_t backward_flops = 2 * Input::size;
        template <forward_pass Pass, class T>
        static void forward(Pass, parameters_view<T, Input::channels> scale, state_view<Pass, T, 0>,
                            std::span<const T> x, std::span<T> y, std::span<T>)
        {
            scale_forward<Input>(scale, x.data(), y.data(), x.size());
        }
        template <class T>
        static void backward(parameters_view<T, Input::channels>, std::span<const T>, std::span<const T>,
                             std::span<T>, std::span<T, Input::channels>, std::span<T>)
        {
        }
    };
};

// No backward_flops.
struct no_backward_flops {
    template <class Input>
    struct bind : scale_base<Input> {
        template <forward_pass Pass, class T>
        static void forward(Pass, parameters_view<T, Input::channels> scale, state_view<Pass, T, 0>,
                            const_batch<T, Input> x, batch_view<T, Input> y, std::span<T>)
        {
            scale_forward<Input>(scale, x.data(), y.data(), x.size());
        }
        template <class T>
        static void backward(parameters_view<T, Input::channels>, const_batch<T, Input>, const_batch<T, Input>,
                             batch_view<T, Input>, std::span<T, Input::channels>, std::span<T>)
        {
        }
    };
};

} // namespace broken
