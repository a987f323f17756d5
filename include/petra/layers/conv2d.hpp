// Two-dimensional convolution without bias (the batch normalisation that
// follows supplies the shift): InChannels -> OutChannels, square Kernel of 1
// or 3, Stride 1 or 2, zero Padding (default: Kernel / 2, which keeps the size
// at stride 1). Weights are OutChannels x InChannels x Kernel x Kernel.
//
// In float, under a thread precision of bf16 (layers/precision.hpp), the
// passes whose bf16 kernels (kernels/convolution_bf16.hpp) are faster than
// the float ones on the CPU's bf16 engine take them
// (kernels::bf16_convolution_pays): on AMX every pass of a kernel over more
// than one input channel except the 1x1 kernel's two gradients; with
// vdpbf16ps the 3x3 forward correlations that Winograd's float form, faster
// there, does not take.
#pragma once

#include <array>
#include <cstddef>
#include <random>
#include <span>
#include <type_traits>

#include <petra/kernels/convolution.hpp>
#include <petra/kernels/convolution_bf16.hpp>
#include <petra/kernels/reduction.hpp>
#include <petra/layers/layer.hpp>
#include <petra/layers/named_arrays.hpp>
#include <petra/layers/precision.hpp>

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
    static constexpr bool accepts = (Input::channels == InChannels && Input::height + 2 * Padding >= Kernel &&
                                     Input::width + 2 * Padding >= Kernel);

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
        static constexpr std::array<layer_array, 1> named_arrays{
            layer_array{"weight", array_role::parameter, 4, {OutChannels, InChannels, Kernel, Kernel}}};
        using unbound = conv2d;
        static constexpr std::size_t workspace_size(std::size_t /*batch*/) { return 0; }
        static constexpr std::size_t forward_flops = 2 * output::size * InChannels * Kernel * Kernel;
        static constexpr std::size_t backward_flops = 2 * forward_flops;
        static constexpr std::size_t winograd_forward_flops =
            kernels::convolution_uses_winograd(
                {1, InChannels, Input::height, Input::width, OutChannels, Kernel, Stride, Padding})
                ? forward_flops
                : 0;

        static constexpr kernels::convolution_shape one_image{1,           InChannels, Input::height, Input::width,
                                                              OutChannels, Kernel,     Stride,        Padding};
        static constexpr kernels::convolution_shape geometry(std::size_t batch)
        {
            return {batch, InChannels, Input::height, Input::width, OutChannels, Kernel, Stride, Padding};
        }

        template <class T>
        static void initialize(std::span<T, parameter_count> parameters, std::span<T, 0>, std::mt19937_64& generator)
        {
            he_normal<T>(parameters, InChannels * Kernel * Kernel, generator);
        }

        // Which passes some bf16 engine computes in bf16 under that
        // precision (top of the file); bf16_taken says whether this CPU's does.
        static constexpr bool bf16_forward =
            kernels::bf16_convolution_pays_on_some_engine(one_image, kernels::convolution_pass::forward);
        static constexpr bool bf16_input_gradient =
            kernels::bf16_convolution_pays_on_some_engine(one_image, kernels::convolution_pass::input_gradient);
        static constexpr bool bf16_weight_gradient =
            kernels::bf16_convolution_pays_on_some_engine(one_image, kernels::convolution_pass::weight_gradient);

        // Whether `pass` computes in bf16 on this thread now: its precision
        // is bf16, some engine takes the pass, and the CPU's engine
        // (kernels::best_bf16_engine, which throws where there is none) does.
        // A pass no engine takes (the stem's) stays float without asking the
        // CPU, so it runs where bf16 is missing, as in double.
        template <class T>
        static bool bf16_taken(kernels::convolution_pass pass)
        {
            if constexpr (!std::is_same_v<T, float>) {
                return false;
            } else {
                return thread_precision() == precision::bf16 &&
                       kernels::bf16_convolution_pays_on_some_engine(one_image, pass) &&
                       kernels::bf16_convolution_pays(one_image, pass, kernels::best_bf16_engine());
            }
        }

        // The convolution kernels' scratch in `arithmetic` (layer.hpp).
        // (Known at compile time, it covers every engine's choice: in bf16,
        // a pass some engine takes in bf16 asks for both kernels' scratch.)
        template <class T>
        static constexpr kernels::scratch_demand forward_scratch(std::size_t batch,
                                                                 precision arithmetic = precision::fp32)
        {
            const auto shape = geometry(batch);
            kernels::scratch_demand demand = kernels::convolution_forward_scratch<T>(shape);
            if (in_bf16<T>(arithmetic, bf16_forward)) demand.merge(kernels::convolution_forward_bf16_scratch(shape));
            return demand;
        }
        template <class T>
        static constexpr kernels::scratch_demand backward_scratch(std::size_t batch, bool input_gradient,
                                                                  precision arithmetic = precision::fp32)
        {
            const auto shape = geometry(batch);
            kernels::scratch_demand demand = kernels::convolution_backward_weights_scratch<T>(shape);
            if (in_bf16<T>(arithmetic, bf16_weight_gradient)) {
                demand.merge(kernels::convolution_backward_weights_bf16_scratch(shape));
            }
            if (input_gradient) {
                demand.merge(kernels::convolution_backward_input_scratch<T>(shape));
                if (in_bf16<T>(arithmetic, bf16_input_gradient)) {
                    demand.merge(kernels::convolution_backward_input_bf16_scratch(shape));
                }
            }
            return demand;
        }

        // Whether forward and backward can read their input through an
        // input map (kernels/input_map.hpp), so that a chain fuses the
        // batch_norm_relu before them (chain.hpp): where the float kernels
        // take one (the bf16 kernels take one for every shape).
        static constexpr bool takes_input_map = kernels::convolution_takes_input_map(geometry(1));

        // Whether forward can also give the batch statistics of its output
        // (output_statistics below), so that a chain lets the batch_norm
        // after it take them rather than read the output again (chain.hpp).
        static constexpr bool gives_output_statistics = true;

        // With an input map (takes_input_map), x is read as if mapped first:
        // forward and the weight gradient compute, to the bit, what they
        // compute on the mapped x; grad_x is the gradient of the mapped x.
        // Where output_statistics is given, forward also writes there the
        // batch mean and variance of each channel of y
        // (kernels::convolution_forward; in bf16 kernels::
        // convolution_forward_bf16, with channel_mean_variance's bits).
        template <forward_pass Pass, class T>
        static void forward(Pass mode, parameters_view<T, parameter_count> parameters, state_view<Pass, T, 0>,
                            const_batch<T, input> x, batch_view<T, output> y, std::span<T>,
                            kernels::affine_relu_map<T> input_map = {},
                            kernels::channel_statistics<T> output_statistics = {})
        {
            if constexpr (std::is_same_v<T, float> && bf16_forward) {
                if (bf16_taken<T>(kernels::convolution_pass::forward)) {
                    kernels::convolution_forward_bf16(geometry(x.batch()), x.data(), parameters.data(), y.data(), 0.0f,
                                                      mode.kernel_scratch, input_map, output_statistics);
                    return;
                }
            }
            kernels::convolution_forward(geometry(x.batch()), x.data(), parameters.data(), y.data(),
                                         mode.kernel_scratch, input_map, output_statistics);
        }

        template <class T>
        static void backward(parameters_view<T, parameter_count> parameters, const_batch<T, input> x,
                             const_batch<T, output> grad_y, batch_view<T, input> grad_x,
                             std::span<T, parameter_count> grad_parameters, std::span<T>,
                             kernels::affine_relu_map<T> input_map = {})
        {
            const auto shape = geometry(x.batch());
            if (grad_x) {
                if (bf16_taken<T>(kernels::convolution_pass::input_gradient)) {
                    if constexpr (std::is_same_v<T, float>) {
                        kernels::convolution_backward_input_bf16(shape, grad_y.data(), parameters.data(),
                                                                 grad_x.data());
                    }
                } else {
                    kernels::convolution_backward_input(shape, grad_y.data(), parameters.data(), grad_x.data());
                }
            }
            if (bf16_taken<T>(kernels::convolution_pass::weight_gradient)) {
                if constexpr (std::is_same_v<T, float>) {
                    kernels::convolution_backward_weights_bf16(shape, x.data(), grad_y.data(), grad_parameters.data(),
                                                               1.0f, {}, input_map);
                }
            } else {
                kernels::convolution_backward_weights(shape, x.data(), grad_y.data(), grad_parameters.data(), T(1), {},
                                                      input_map);
            }
        }

    private:
        // Whether a pass that has bf16 kernels (`has_bf16`) computes in bf16
        // in `arithmetic`: in float only.
        template <class T>
        static constexpr bool in_bf16(precision arithmetic, bool has_bf16)
        {
            return std::is_same_v<T, float> && has_bf16 && arithmetic == precision::bf16;
        }
    };
};

} // namespace petra
