// Two-dimensional convolution without bias (the batch normalisation that
// follows supplies the shift): InChannels -> OutChannels, square Kernel of 1
// or 3, Stride 1 or 2, zero Padding (default: Kernel / 2, which keeps the size
// at stride 1). Weights are OutChannels x InChannels x Kernel x Kernel.
#pragma once

#include <cstddef>
#include <random>

#include <petra/kernels/convolution.hpp>
#include <petra/layers/layer.hpp>

namespace petra {

template <std::size_t InChannels, std::size_t OutChannels, std::size_t Kernel = 3, std::size_t Stride = 1,
          std::size_t Padding = Kernel / 2>
struct conv2d {
    static_assert(Kernel == 1 || Kernel == 3, "conv2d supports kernels of 1x1 and 3x3.");
    static_assert(Stride == 1 || Stride == 2, "conv2d supports strides of 1 and 2.");
    static_assert(Padding < Kernel, "conv2d needs a padding smaller than its kernel.");
    static_assert(InChannels > 0 && OutChannels > 0, "conv2d needs at least one input and one output channel.");

    // The inputs bind accepts (see layer_accepts).
    template <class Input>
    static constexpr bool accepts = Input::channels == InChannels && Input::height + 2 * Padding >= Kernel &&
                                    Input::width + 2 * Padding >= Kernel;

    template <class Input>
    struct bind {
        static_assert(Input::channels == InChannels,
                      "conv2d: the input does not have the number of channels the layer expects.");
        static_assert(Input::height + 2 * Padding >= Kernel && Input::width + 2 * Padding >= Kernel,
                      "conv2d: the padded input is smaller than the kernel.");
        using input = Input;
        using output = shape<OutChannels, (Input::height + 2 * Padding - Kernel) / Stride + 1,
                             (Input::width + 2 * Padding - Kernel) / Stride + 1>;
        static constexpr std::size_t parameter_count = OutChannels * InChannels * Kernel * Kernel;
        static constexpr std::size_t weight_count = parameter_count; // all decay
        static constexpr std::size_t state_count = 0;
        static constexpr std::size_t cache_size(std::size_t /*batch*/) { return 0; }
        static constexpr std::size_t forward_flops = 2 * output::size * InChannels * Kernel * Kernel;
        static constexpr std::size_t backward_flops = 2 * forward_flops;

        static constexpr kernels::convolution_shape geometry(std::size_t batch)
        {
            return {batch, InChannels, Input::height, Input::width, OutChannels, Kernel, Stride, Padding};
        }

        template <class T>
        static void initialize(T* parameters, T* /*state*/, std::mt19937_64& generator)
        {
            he_normal(parameters, parameter_count, InChannels * Kernel * Kernel, generator);
        }

        template <class T>
        static void forward(pass, std::size_t batch, const T* parameters, T* /*state*/, const T* x, T* y,
                            T* /*cache*/)
        {
            kernels::convolution_forward(geometry(batch), x, parameters, y);
        }

        template <class T>
        static void backward(std::size_t batch, const T* parameters, const T* x, T* /*cache*/,
                             const T* grad_y, T* grad_x, T* grad_parameters)
        {
            if (grad_x != nullptr) kernels::convolution_backward_input(geometry(batch), grad_y, parameters, grad_x);
            kernels::convolution_backward_weights(geometry(batch), x, grad_y, grad_parameters, T(1));
        }
    };
};

} // namespace petra
