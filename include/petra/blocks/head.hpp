// The head: the two halves concatenated along the channels (back to one NCHW
// tensor of 2C channels), then the layer F (usually pooling and a dense layer)
// to the logits. The loss is applied to the head's output by the trainer. Not
// reversible: it keeps its input and recomputes from it (see block.hpp).
#pragma once

#include <array>
#include <cstddef>
#include <random>
#include <span>
#include <string_view>

#include <petra/blocks/block.hpp>
#include <petra/layers/batch_norm.hpp>
#include <petra/layers/chain.hpp>
#include <petra/layers/contract.hpp>
#include <petra/layers/dense.hpp>
#include <petra/layers/layer.hpp>
#include <petra/layers/pooling.hpp>
#include <petra/layers/relu.hpp>

namespace petra {

template <class F>
struct head : block_kind {
    template <class Input>
    static constexpr bool accepts = [] {
        if constexpr (is_halves<Input>::value) {
            return layer_accepts<F, concatenated_halves<Input>>();
        } else {
            return false;
        }
    }();

    template <class Input>
    struct bind : made_of<checked_layer_for<F, concatenated_halves<Input>>> {
        // The parts, their parameters and state end to end (made_of).
        using parts = made_of<checked_layer_for<F, concatenated_halves<Input>>>;
        using parts::parameter_count;
        using parts::state_count;
        using unbound = head;
        // The names of the parts in the names of the arrays (parameter_names.hpp).
        static constexpr std::array<std::string_view, 1> part_names{"f"};
        using half = typename half_of<Input>::type;
        using whole = concatenated_halves<Input>;
        using function = checked_layer_for<F, whole>;
        using input = Input;
        using output = typename function::output;
        static constexpr bool reversible = false;
        static constexpr std::size_t forward_flops = function::forward_flops;
        static constexpr std::size_t backward_flops = function::backward_flops;
        static constexpr std::size_t winograd_forward_flops = winograd_forward_flops_of<function>();

        // The concatenated input, its gradient, then F's workspace.
        static constexpr std::size_t workspace_size(std::size_t batch)
        {
            return 2 * batch * whole::size + function::workspace_size(batch);
        }

        template <forward_pass Pass, class T>
        static void forward(Pass mode, parameters_view<T, parameter_count> parameters,
                            state_view<Pass, T, state_count> state, const_batch<T, input> x, batch_view<T, output> y,
                            std::span<T> workspace)
        {
            const workspace_layout<T> at{workspace, x.batch()};
            merge_halves<half>(x, at.concatenated());
            function::forward(mode, parameters, state, at.concatenated(), y, at.function_workspace());
        }

        static constexpr bool recomputation_writes_output() { return petra::recomputation_writes_output<function>(); }
        // What backward needs of a recomputation (recompute_for_backward_of,
        // layers/layer.hpp): the concatenated input, then F's.
        template <class T>
        static void recompute_for_backward(pass::recomputation_t mode, parameters_view<T, parameter_count> parameters,
                                           state_view<pass::recomputation_t, T, state_count> state,
                                           const_batch<T, input> x, batch_view<T, output> y, std::span<T> workspace)
        {
            const workspace_layout<T> at{workspace, x.batch()};
            merge_halves<half>(x, at.concatenated());
            recompute_for_backward_of<function>(mode, parameters, state, at.concatenated(), y, at.function_workspace());
        }

        template <class T>
        static void backward(parameters_view<T, parameter_count> parameters, const_batch<T, input> x,
                             const_batch<T, output> grad_y, batch_view<T, input> grad_x,
                             std::span<T, parameter_count> grad_parameters, std::span<T> workspace)
        {
            const workspace_layout<T> at{workspace, x.batch()};
            function::backward(parameters, at.concatenated(), grad_y, at.gradient(), grad_parameters,
                               at.function_workspace());
            split_into_halves<half>(at.gradient(), grad_x);
        }

    private:
        template <class T>
        struct workspace_layout {
            std::span<T> all;
            std::size_t batch;
            batch_view<T, whole> concatenated() const { return {all.data(), batch}; }
            batch_view<T, whole> gradient() const { return {all.data() + batch * whole::size, batch}; }
            std::span<T> function_workspace() const
            {
                return all.subspan(2 * batch * whole::size, function::workspace_size(batch));
            }
        };
    };
};

// The reference network's head: global average pooling of the 2 C channels,
// then a dense layer to Classes logits.
template <std::size_t Channels, std::size_t Classes>
using classifier_head = head<chain<global_average_pool, dense<Channels, Classes>>>;

// A head for a stream that nothing has normalised since the stem (a fully
// reversible network, whose couplings only add to their input): batch
// normalisation and ReLU before the pooling, so that the dense layer sees
// features of unit scale whatever the depth. Without it the pooled
// features grow with every coupling, and so do the logits and the dense
// layer's effective step (proportional to the features' squared norm).
template <std::size_t Channels, std::size_t Classes>
using normalised_classifier_head =
    head<chain<batch_norm<Channels>, relu, global_average_pool, dense<Channels, Classes>>>;

} // namespace petra
