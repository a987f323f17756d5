// Batch normalisation over Channels channels of any spatial size:
//   y = gamma * (x - mean) / sqrt(variance + epsilon) + beta, per channel,
// with the mean and (biased) variance of the batch in training and
// recomputation passes, and the running statistics in inference. Parameters:
// gamma[C] then beta[C]. State: running mean[C] then running variance[C],
// updated by training passes only (running = (1 - momentum) running +
// momentum batch, the variance unbiased), so that a reconstruction, which
// recomputes a forward already counted, leaves them as they were.
//
// batch_norm_relu<C> is batch_norm<C> followed by relu, fused: the same
// parameters and state, the normalised values never stored, one pass over
// the activation fewer each way, and the same numbers to the bit. A chain
// uses it wherever batch_norm<C> is followed by relu (fusion.hpp); users
// need not name it. Where a convolution that takes an input map follows it,
// the chain does not even write its output: it computes the statistics
// (forward_statistics) and the convolution reads the input through the
// layer's output_map (kernels/input_map.hpp), in forward and in its weight
// gradient, to the same bits. Where a convolution precedes it, the chain has
// the convolution compute the batch statistics as it writes its output
// (takes_input_statistics), and the layer does not read its input for them.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <random>
#include <span>
#include <type_traits>

#include <petra/error.hpp>
#include <petra/kernels/input_map.hpp>
#include <petra/kernels/normalization.hpp>
#include <petra/kernels/reduction.hpp>
#include <petra/layers/fusion.hpp>
#include <petra/layers/layer.hpp>
#include <petra/layers/named_arrays.hpp>
#include <petra/layers/relu.hpp>

namespace petra {

template <std::size_t Channels>
struct batch_norm;
template <std::size_t Channels>
struct batch_norm_relu;

namespace detail {

// Batch normalisation of Channels channels bound to Input, followed by a
// ReLU when WithRelu.
template <class Input, std::size_t Channels, bool WithRelu>
struct bound_normalization {
    static_assert(Input::channels == Channels,
                  "batch_norm: the input does not have the number of channels the layer expects.");
    static constexpr double epsilon = 1e-5;
    static constexpr double momentum = 0.1;

    using unbound = std::conditional_t<WithRelu, batch_norm_relu<Channels>, batch_norm<Channels>>;
    using input = Input;
    using output = Input;
    static constexpr std::size_t pixels = Input::pixels;
    static constexpr std::size_t parameter_count = 2 * Channels;
    static constexpr std::size_t state_count = 2 * Channels;
    static constexpr std::array<layer_array, 4> named_arrays{
        layer_array{"weight", array_role::parameter, 1, {Channels}},
        layer_array{"bias", array_role::parameter, 1, {Channels}},
        layer_array{"running_mean", array_role::state, 1, {Channels}},
        layer_array{"running_var", array_role::state, 1, {Channels}}};
    // With the ReLU fused, the layer stands for two of the user's.
    static constexpr std::size_t layer_span = WithRelu ? 2 : 1;
    // The batch mean and inverse standard deviation of each channel.
    static constexpr std::size_t workspace_size(std::size_t /*batch*/) { return 2 * Channels; }
    static constexpr std::size_t forward_flops = (WithRelu ? 5 : 4) * Input::size;
    static constexpr std::size_t backward_flops = (WithRelu ? 9 : 8) * Input::size;

    // gamma = 1, beta = 0; running mean 0, running variance 1.
    template <class T>
    static void initialize(std::span<T, parameter_count> parameters, std::span<T, state_count> state,
                           std::mt19937_64& /*generator*/)
    {
        std::fill_n(parameters.data(), Channels, T(1));
        std::fill_n(parameters.data() + Channels, Channels, T(0));
        std::fill_n(state.data(), Channels, T(0));
        std::fill_n(state.data() + Channels, Channels, T(1));
    }

    template <forward_pass Pass, class T>
    static void forward(Pass mode, parameters_view<T, parameter_count> parameters,
                        state_view<Pass, T, state_count> state, const_batch<T, input> x, batch_view<T, output> y,
                        std::span<T> workspace)
    {
        normalize<false>(mode, parameters, state, x, y, workspace, static_cast<const T*>(nullptr), false);
    }

    // Whether the layer can take the batch statistics of its input from the
    // layer that produced it (a convolution: gives_output_statistics), so
    // that a chain spares it a pass over its input (chain.hpp). The
    // producer writes them where input_statistics says, in this layer's
    // workspace, and the forward then takes input_statistics_given
    // (layer.hpp): only in passes that compute batch statistics.
    static constexpr bool takes_input_statistics = true;
    template <class T>
    static kernels::channel_statistics<T> input_statistics(std::span<T> workspace)
    {
        // The inverse deviation's place holds the variance until statistics() turns it into one.
        return {workspace.data(), workspace.data() + Channels};
    }
    template <forward_pass Pass, class T>
    static void forward(Pass mode, parameters_view<T, parameter_count> parameters,
                        state_view<Pass, T, state_count> state, const_batch<T, input> x, batch_view<T, output> y,
                        std::span<T> workspace, input_statistics_given_t)
    {
        normalize<true>(mode, parameters, state, x, y, workspace, static_cast<const T*>(nullptr), false);
    }

    // A chain may leave this layer's output unwritten and have the next
    // layer read its input through output_map (chain.hpp): with the ReLU,
    // the map is one a convolution kernel applies as it reads.
    static constexpr bool maps_output = WithRelu;

    // The part of forward that output_map needs: the batch statistics (or
    // the running ones) into the workspace, the running statistics updated
    // by a training pass, and no output written.
    template <forward_pass Pass, class T>
    static void forward_statistics(Pass, parameters_view<T, parameter_count> /*parameters*/,
                                   state_view<Pass, T, state_count> state, const_batch<T, input> x,
                                   std::span<T> workspace)
    {
        statistics<Pass, false>(state, x, workspace);
    }
    // The same with the batch statistics given (takes_input_statistics):
    // only the running statistics' update and the inverse deviations.
    template <forward_pass Pass, class T>
    static void forward_statistics(Pass, parameters_view<T, parameter_count> /*parameters*/,
                                   state_view<Pass, T, state_count> state, const_batch<T, input> x,
                                   std::span<T> workspace, input_statistics_given_t)
    {
        statistics<Pass, true>(state, x, workspace);
    }

    // What forward writes, as the map of its input: y = output_map(...)(c,
    // x) for every value x of channel c, to the bit (forward_statistics or
    // forward having filled the workspace). The map points into the
    // returned value.
    template <class T>
    struct output_map_values {
        std::array<T, Channels> scale, shift;
        kernels::affine_relu_map<T> map() const { return {scale.data(), shift.data()}; }
    };
    template <class T>
    static output_map_values<T> output_map(parameters_view<T, parameter_count> parameters, std::span<T> workspace)
    {
        const affine<T> map(parameters, workspace);
        return {map.scale, map.shift};
    }

    // forward's values combined with the addend in its last pass (layer.hpp).
    template <forward_pass Pass, class T>
    static void forward_onto(Pass mode, combination how, parameters_view<T, parameter_count> parameters,
                             state_view<Pass, T, state_count> state, const_batch<T, input> x,
                             const_batch<T, output> addend, batch_view<T, output> y, std::span<T> workspace)
    {
        normalize<false>(mode, parameters, state, x, y, workspace, addend.data(), how == combination::subtract_from);
    }
    template <forward_pass Pass, class T>
    static void forward_onto(Pass mode, combination how, parameters_view<T, parameter_count> parameters,
                             state_view<Pass, T, state_count> state, const_batch<T, input> x,
                             const_batch<T, output> addend, batch_view<T, output> y, std::span<T> workspace,
                             input_statistics_given_t)
    {
        normalize<true>(mode, parameters, state, x, y, workspace, addend.data(), how == combination::subtract_from);
    }

    // The gradient of a training (or recomputation) pass, where mean and
    // variance depend on x: with x_hat = (x - mean) * inverse_deviation
    // and count = batch * pixels, per channel
    //   grad_beta  += sum grad_y,   grad_gamma += sum grad_y * x_hat,
    //   grad_x = gamma * inverse_deviation / count
    //            * (count * grad_y - sum grad_y - x_hat * sum grad_y * x_hat),
    // where, WithRelu, grad_y is the gradient behind the ReLU: zero where the
    // normalised value (recomputed from x and the workspace, as forward computed
    // it) is not positive.
    template <class T>
    static void backward(parameters_view<T, parameter_count> parameters, const_batch<T, input> x,
                         const_batch<T, output> grad_y, batch_view<T, input> grad_x,
                         std::span<T, parameter_count> grad_parameters, std::span<T> workspace)
    {
        const std::size_t batch = x.batch();
        const T* gamma = parameters.data();
        const T* mean = workspace.data();
        const T* inverse_deviation = workspace.data() + Channels;
        const T count = static_cast<T>(batch * pixels);
        std::array<T, Channels> sum_grad, sum_grad_deviation;
        [[maybe_unused]] const affine<T> map(parameters, workspace);
        if constexpr (WithRelu) {
            kernels::channel_relu_gradient_sums<T>({.batch = batch,
                                                    .channels = Channels,
                                                    .positions = pixels,
                                                    .grad_y = grad_y.data(),
                                                    .x = x.data(),
                                                    .mean = mean,
                                                    .scale = map.scale.data(),
                                                    .shift = map.shift.data(),
                                                    .sum_grad_y = sum_grad.data(),
                                                    .sum_grad_y_deviation = sum_grad_deviation.data()});
        } else {
            kernels::channel_gradient_sums<T>({.batch = batch,
                                               .channels = Channels,
                                               .positions = pixels,
                                               .grad_y = grad_y.data(),
                                               .x = x.data(),
                                               .mean = mean,
                                               .sum_grad_y = sum_grad.data(),
                                               .sum_grad_y_deviation = sum_grad_deviation.data()});
        }
        // grad_x = grad_y_coefficient grad_y + x_coefficient x + offset, per
        // channel, with
        //   grad_y_coefficient = gamma inverse_deviation,
        //   x_coefficient = -grad_y_coefficient inverse_deviation sum_grad_x_hat / count,
        //   offset = -grad_y_coefficient sum_grad / count - x_coefficient mean.
        std::array<T, Channels> grad_y_coefficient, x_coefficient, offset;
        for (std::size_t c = 0; c < Channels; ++c) {
            const T sum_grad_x_hat = sum_grad_deviation[c] * inverse_deviation[c];
            grad_parameters[c] += sum_grad_x_hat;
            grad_parameters[Channels + c] += sum_grad[c];
            grad_y_coefficient[c] = gamma[c] * inverse_deviation[c];
            x_coefficient[c] = -grad_y_coefficient[c] * inverse_deviation[c] * sum_grad_x_hat / count;
            offset[c] = -grad_y_coefficient[c] * sum_grad[c] / count - x_coefficient[c] * mean[c];
        }
        if (!grad_x) return;
        if constexpr (WithRelu) {
            kernels::channel_relu_combination<T>({.batch = batch,
                                                  .channels = Channels,
                                                  .positions = pixels,
                                                  .grad_y = grad_y.data(),
                                                  .x = x.data(),
                                                  .scale = map.scale.data(),
                                                  .shift = map.shift.data(),
                                                  .grad_y_coefficient = grad_y_coefficient.data(),
                                                  .x_coefficient = x_coefficient.data(),
                                                  .offset = offset.data(),
                                                  .grad_x = grad_x.data()});
        } else {
            kernels::channel_combination<T>({.batch = batch,
                                             .channels = Channels,
                                             .positions = pixels,
                                             .grad_y = grad_y.data(),
                                             .x = x.data(),
                                             .grad_y_coefficient = grad_y_coefficient.data(),
                                             .x_coefficient = x_coefficient.data(),
                                             .offset = offset.data(),
                                             .grad_x = grad_x.data()});
        }
    }

private:
    // forward, with the map's values combined with addend where it is not
    // null (kernels::channel_affine_arguments); Given: the batch statistics
    // are in the workspace already (takes_input_statistics).
    template <bool Given, forward_pass Pass, class T>
    static void normalize(Pass, parameters_view<T, parameter_count> parameters, state_view<Pass, T, state_count> state,
                          const_batch<T, input> x, batch_view<T, output> y, std::span<T> workspace, const T* addend,
                          bool subtract_from_addend)
    {
        statistics<Pass, Given>(state, x, workspace);
        const affine<T> map(parameters, workspace);
        const kernels::channel_affine_arguments<T> arguments{.batch = x.batch(),
                                                             .channels = Channels,
                                                             .positions = pixels,
                                                             .x = x.data(),
                                                             .scale = map.scale.data(),
                                                             .shift = map.shift.data(),
                                                             .y = y.data(),
                                                             .addend = addend,
                                                             .subtract_from_addend = subtract_from_addend};
        if constexpr (WithRelu) kernels::channel_affine_relu<T>(arguments);
        else kernels::channel_affine<T>(arguments);
    }

    // The mean and inverse deviation of each channel into the workspace:
    // the batch's (and the running statistics updated by a training pass),
    // or the running ones. Given: the batch's mean and variance are in the
    // workspace already (input_statistics), x is not read.
    template <forward_pass Pass, bool Given, class T>
    static void statistics(state_view<Pass, T, state_count> state, const_batch<T, input> x, std::span<T> workspace)
    {
        static_assert(!(Given && Pass::uses_running_statistics),
                      "batch_norm: a pass that normalises with the running statistics takes no batch statistics.");
        const std::size_t batch = x.batch();
        T* mean = workspace.data();
        T* inverse_deviation = workspace.data() + Channels;
        if constexpr (Pass::uses_running_statistics) {
            for (std::size_t c = 0; c < Channels; ++c) {
                mean[c] = state[c];
                inverse_deviation[c] = T(1) / std::sqrt(state[Channels + c] + T(epsilon));
            }
        } else {
            if (batch * pixels < 2) {
                raise_error(error_kind::invalid_argument,
                            "batch_norm: training needs at least two values per channel in a batch");
            }
            T* variance = inverse_deviation;
            if constexpr (!Given) kernels::channel_mean_variance(batch, Channels, pixels, x.data(), mean, variance);
            if constexpr (Pass::updates_running_statistics) {
                const T unbiased = T(batch * pixels) / T(batch * pixels - 1);
                for (std::size_t c = 0; c < Channels; ++c) {
                    state[c] = T(1 - momentum) * state[c] + T(momentum) * mean[c];
                    state[Channels + c] = T(1 - momentum) * state[Channels + c] + T(momentum) * unbiased * variance[c];
                }
            }
            for (std::size_t c = 0; c < Channels; ++c)
                inverse_deviation[c] = T(1) / std::sqrt(variance[c] + T(epsilon));
        }
    }

    // The per-channel map y = scale x + shift of a pass, from gamma, beta and
    // the mean and inverse deviation the pass used.
    template <class T>
    struct affine {
        std::array<T, Channels> scale, shift;

        affine(std::span<const T, parameter_count> parameters, std::span<const T> workspace)
        {
            const T* gamma = parameters.data();
            const T* beta = parameters.data() + Channels;
            const T* mean = workspace.data();
            const T* inverse_deviation = workspace.data() + Channels;
            for (std::size_t c = 0; c < Channels; ++c) {
                scale[c] = gamma[c] * inverse_deviation[c];
                shift[c] = beta[c] - scale[c] * mean[c];
            }
        }
    };
};

} // namespace detail

template <std::size_t Channels>
struct batch_norm {
    static_assert(Channels > 0, "batch_norm needs at least one channel.");
    static constexpr double epsilon = 1e-5;
    static constexpr double momentum = 0.1;

    // The inputs bind accepts (see layer_accepts).
    template <class Input>
    static constexpr bool accepts = Input::channels == Channels;

    template <class Input>
    using bind = detail::bound_normalization<Input, Channels, false>;
};

template <std::size_t Channels>
struct batch_norm_relu {
    static_assert(Channels > 0, "batch_norm needs at least one channel.");

    template <class Input>
    static constexpr bool accepts = Input::channels == Channels;

    template <class Input>
    using bind = detail::bound_normalization<Input, Channels, true>;
};

// In a chain, batch_norm<C> followed by relu runs as batch_norm_relu<C>.
template <std::size_t Channels>
struct fused_layers<batch_norm<Channels>, relu> {
    using type = batch_norm_relu<Channels>;
};

} // namespace petra
