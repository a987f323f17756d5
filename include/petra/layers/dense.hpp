// Fully connected layer: y = W x + b for every example, with W of Outputs x
// Inputs values (row-major) followed by b in the parameter array. The input
// may have any shape of Inputs values (it is read flat); the output is
// shape<Outputs>.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <random>
#include <span>

#include <petra/kernels/gemm.hpp>
#include <petra/layers/layer.hpp>
#include <petra/layers/named_arrays.hpp>

namespace petra {

template <std::size_t Inputs, std::size_t Outputs>
struct dense {
    static_assert(Inputs > 0 && Outputs > 0, "A dense layer needs at least one input and one output.");

    // The inputs bind accepts (see layer_accepts).
    template <class Input>
    static constexpr bool accepts = Input::size == Inputs;

    template <class Input>
    struct bind {
        static_assert(Input::size == Inputs, "dense: the input does not have the number of values the layer expects.");
        using input = Input;
        using output = shape<Outputs>;
        static constexpr std::size_t weight_count = Outputs * Inputs;
        static constexpr std::size_t parameter_count = weight_count + Outputs;
        static constexpr std::size_t state_count = 0;
        static constexpr std::array<layer_array, 2> named_arrays{
            layer_array{"weight", array_role::parameter, 2, {Outputs, Inputs}},
            layer_array{"bias", array_role::parameter, 1, {Outputs}}};
        using unbound = dense;
        static constexpr std::size_t workspace_size(std::size_t /*batch*/) { return 0; }
        static constexpr std::size_t forward_flops = 2 * Inputs * Outputs;
        static constexpr std::size_t backward_flops = 4 * Inputs * Outputs;

        // He-normal weights, zero bias.
        template <class T>
        static void initialize(std::span<T, parameter_count> parameters, std::span<T, 0>, std::mt19937_64& generator)
        {
            he_normal<T>(parameters.first(weight_count), Inputs, generator);
            std::fill_n(parameters.data() + weight_count, Outputs, T(0));
        }

        // The GEMM's packed operands (layer.hpp).
        template <class T>
        static constexpr kernels::scratch_demand forward_scratch(std::size_t batch)
        {
            return kernels::gemm_scratch<T>(batch, Outputs, Inputs);
        }
        template <class T>
        static constexpr kernels::scratch_demand backward_scratch(std::size_t batch, bool input_gradient)
        {
            kernels::scratch_demand demand = kernels::gemm_scratch<T>(Outputs, Inputs, batch);
            if (input_gradient) demand.merge(kernels::gemm_scratch<T>(batch, Inputs, Outputs));
            return demand;
        }

        template <forward_pass Pass, class T>
        static void forward(Pass mode, parameters_view<T, parameter_count> parameters, state_view<Pass, T, 0>,
                            const_batch<T, input> x, batch_view<T, output> y, std::span<T>)
        {
            using kernels::transpose;
            const T* bias = parameters.data() + weight_count;
            // y = bias, then y += x W^T.
            for (std::size_t n = 0; n < x.batch(); ++n) std::copy_n(bias, Outputs, y.data() + n * Outputs);
            kernels::gemm<T>({.op_a = transpose::no,
                              .op_b = transpose::yes,
                              .m = x.batch(),
                              .n = Outputs,
                              .k = Inputs,
                              .alpha = T(1),
                              .a = x.data(),
                              .lda = Inputs,
                              .b = parameters.data(),
                              .ldb = Inputs,
                              .beta = T(1),
                              .c = y.data(),
                              .ldc = Outputs},
                             mode.kernel_scratch);
        }

        template <class T>
        static void backward(parameters_view<T, parameter_count> parameters, const_batch<T, input> x,
                             const_batch<T, output> grad_y, batch_view<T, input> grad_x,
                             std::span<T, parameter_count> grad_parameters, std::span<T>)
        {
            using kernels::transpose;
            const std::size_t batch = x.batch();
            if (grad_x) {
                kernels::gemm<T>({.op_a = transpose::no,
                                  .op_b = transpose::no,
                                  .m = batch,
                                  .n = Inputs,
                                  .k = Outputs,
                                  .alpha = T(1),
                                  .a = grad_y.data(),
                                  .lda = Outputs,
                                  .b = parameters.data(),
                                  .ldb = Inputs,
                                  .beta = T(0),
                                  .c = grad_x.data(),
                                  .ldc = Inputs});
            }
            kernels::gemm<T>({.op_a = transpose::yes,
                              .op_b = transpose::no,
                              .m = Outputs,
                              .n = Inputs,
                              .k = batch,
                              .alpha = T(1),
                              .a = grad_y.data(),
                              .lda = Outputs,
                              .b = x.data(),
                              .ldb = Inputs,
                              .beta = T(1),
                              .c = grad_parameters.data(),
                              .ldc = Inputs});
            T* grad_bias = grad_parameters.data() + weight_count;
            for (std::size_t n = 0; n < batch; ++n) {
                for (std::size_t o = 0; o < Outputs; ++o) grad_bias[o] += grad_y.data()[n * Outputs + o];
            }
        }
    };
};

} // namespace petra
