// A user's own layers and blocks for the compile-fail cases: a per-channel
// scale that follows the layer contract (layers/layer.hpp), variants of it
// that break the contract in the ways users break it, each right but for
// one thing, and a block that doubles both halves.
#pragma once

#include <cstddef>
#include <random>
#include <span>

#include <petra/core.hpp>

namespace user {

using namespace petra;

template <class Input, class T>
void scale_forward(std::span<const T, Input::channels> scale, const T* x, T* y, std::size_t size)
{
    for (std::size_t i = 0; i < size; ++i) y[i] = scale[(i / Input::pixels) % Input::channels] * x[i];
}

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
    template <forward_pass Pass, class T>
    static void forward(Pass, parameters_view<T, Input::channels> scale, state_view<Pass, T, 0>,
                        const_batch<T, Input> x, batch_view<T, Input> y, std::span<T>)
    {
        scale_forward<Input>(scale, x.data(), y.data(), x.size());
    }
};

// Follows the contract: petra trains and runs it.
struct working_scale {
    template <class Input>
    struct bind : scale_base<Input> {
        static constexpr std::size_t backward_flops = 2 * Input::size;
        template <class T>
        static void backward(parameters_view<T, Input::channels> scale, const_batch<T, Input> x,
                             const_batch<T, Input> grad_y, batch_view<T, Input> grad_x,
                             std::span<T, Input::channels> grad_scale, std::span<T>)
        {
            for (std::size_t i = 0; i < x.size(); ++i) {
                const std::size_t c = (i / Input::pixels) % Input::channels;
                if (grad_x) grad_x.data()[i] = scale[c] * grad_y.data()[i];
                grad_scale[c] += x.data()[i] * grad_y.data()[i];
            }
        }
    };
};

// backward(x, grad_y, grad_x, parameters, grad_parameters, workspace): the
// parameters after the batches, not first.
struct swapped_backward {
    template <class Input>
    struct bind : scale_base<Input> {
        static constexpr std::size_t backward_flops = 2 * Input::size;
        template <class T>
        static void backward(const_batch<T, Input>, const_batch<T, Input>, batch_view<T, Input>,
                             std::span<const T, Input::channels>, std::span<T, Input::channels>, std::span<T>)
        {}
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
        static void backward(parameters_view<T, Input::channels>, std::span<const T>, std::span<const T>, std::span<T>,
                             std::span<T, Input::channels>, std::span<T>)
        {}
    };
};

// No backward_flops.
struct no_backward_flops {
    template <class Input>
    struct bind : scale_base<Input> {
        template <class T>
        static void backward(parameters_view<T, Input::channels>, const_batch<T, Input>, const_batch<T, Input>,
                             batch_view<T, Input>, std::span<T, Input::channels>, std::span<T>)
        {}
    };
};

} // namespace user

namespace user {

// Both halves doubled: a block that keeps its input (not reversible), or,
// with Reversible, one that says it is reversible but has no inverse.
template <bool Reversible>
struct doubling_block : block_kind {
    template <class Input>
    static constexpr bool accepts = is_halves<Input>::value;

    template <class Input>
    struct bind {
        using input = Input;
        using output = Input;
        static constexpr bool reversible = Reversible;
        static constexpr std::size_t parameter_count = 0;
        static constexpr std::size_t state_count = 0;
        static constexpr std::size_t forward_flops = Input::size;
        static constexpr std::size_t backward_flops = Input::size;
        static constexpr std::size_t workspace_size(std::size_t) { return 0; }

        template <class T>
        static void initialize(std::span<T, 0>, std::span<T, 0>, std::mt19937_64&)
        {}
        template <forward_pass Pass, class T>
        static void forward(Pass, parameters_view<T, 0>, state_view<Pass, T, 0>, const_batch<T, input> x,
                            batch_view<T, output> y, std::span<T>)
        {
            for (std::size_t i = 0; i < x.size(); ++i) y.data()[i] = 2 * x.data()[i];
        }
        template <class T>
        static void backward(parameters_view<T, 0>, const_batch<T, input>, const_batch<T, output> grad_y,
                             batch_view<T, input> grad_x, std::span<T, 0>, std::span<T>)
        {
            for (std::size_t i = 0; i < grad_y.size(); ++i) grad_x.data()[i] = 2 * grad_y.data()[i];
        }
    };
};

// doubling_block on a plain shape that says it passes its first half through
// (a pair of halves only has halves to pass).
struct half_passing_plain_block : block_kind {
    template <class Input>
    static constexpr bool accepts = a_shape<Input>;

    template <class Input>
    struct bind : doubling_block<false>::bind<Input> {
        static constexpr bool passes_first_half_through = true;
    };
};

} // namespace user
