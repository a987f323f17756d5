// Fully connected layer: y = W x + b for every example, with W of Outputs x
// Inputs values (row-major) followed by b in the parameter array. The input
// may have any shape of Inputs values (it is read flat); the output is
// shape<Outputs>.
#pragma once

#include <algorithm>
#include <cstddef>
#include <random>

#include <petra/kernels/gemm.hpp>
#include <petra/layers/layer.hpp>

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
        static constexpr std::size_t cache_size(std::size_t /*batch*/) { return 0; }
        static constexpr std::size_t forward_flops = 2 * Inputs * Outputs;
        static constexpr std::size_t backward_flops = 4 * Inputs * Outputs;

        // He-normal weights, zero bias.
        template <class T>
        static void initialize(T* parameters, T* /*state*/, std::mt19937_64& generator)
        {
            he_normal(parameters, weight_count, Inputs, generator);
            std::fill(parameters + weight_count, parameters + parameter_count, T(0));
        }

        template <class T>
        static void forward(pass, std::size_t batch, const T* parameters, T* /*state*/, const T* x, T* y,
                            T* /*cache*/)
        {
            using kernels::transpose;
            const T* bias = parameters + weight_count;
            // y = bias, then y += x W^T.
            for (std::size_t n = 0; n < batch; ++n) std::copy(bias, bias + Outputs, y + n * Outputs);
            kernels::gemm<T>(transpose::no, transpose::yes, batch, Outputs, Inputs, T(1), x, Inputs, parameters,
                             Inputs, T(1), y, Outputs);
        }

        template <class T>
        static void backward(std::size_t batch, const T* parameters, const T* x, T* /*cache*/,
                             const T* grad_y, T* grad_x, T* grad_parameters)
        {
            using kernels::transpose;
            if (grad_x != nullptr) {
                kernels::gemm<T>(transpose::no, transpose::no, batch, Inputs, Outputs, T(1), grad_y, Outputs,
                                 parameters, Inputs, T(0), grad_x, Inputs);
            }
            kernels::gemm<T>(transpose::yes, transpose::no, Outputs, Inputs, batch, T(1), grad_y, Outputs, x, Inputs,
                             T(1), grad_parameters, Inputs);
            T* grad_bias = grad_parameters + weight_count;
            for (std::size_t n = 0; n < batch; ++n) {
                for (std::size_t o = 0; o < Outputs; ++o) grad_bias[o] += grad_y[n * Outputs + o];
            }
        }
    };
};

} // namespace petra
