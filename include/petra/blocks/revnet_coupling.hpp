// The two-function reversible block of RevNet:
//   forward:  y1 = x1 + F(x2),  y2 = x2 + G(y1)
//   inverse:  x2 = y2 - G(y1),  x1 = y1 - F(x2)
// where F and G are layers (usually chains) that keep the shape of one half.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <random>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>

#include <petra/blocks/block.hpp>
#include <petra/kernels/elementwise.hpp>
#include <petra/layers/contract.hpp>
#include <petra/layers/layer.hpp>

namespace petra {

template <class F, class G>
struct revnet_coupling : block_kind {
    template <class Input>
    static constexpr bool accepts = halves_accepted_by<Input, F, G>();

    template <class Input>
    struct bind : made_of<checked_layer_for<F, typename half_of<Input>::type>,
                          checked_layer_for<G, typename half_of<Input>::type>> {
        // The parts, their parameters and state end to end (made_of).
        using parts = made_of<checked_layer_for<F, typename half_of<Input>::type>,
                              checked_layer_for<G, typename half_of<Input>::type>>;
        using parts::parameter_count;
        using parts::state_count;
        using unbound = revnet_coupling;
        // The names of the parts in the names of the arrays (parameter_names.hpp).
        static constexpr std::array<std::string_view, 2> part_names{"f", "g"};
        using half = typename half_of<Input>::type;
        using first = checked_layer_for<F, half>;
        using second = checked_layer_for<G, half>;
        static_assert(std::is_same_v<typename first::output, half>,
                      "revnet_coupling: F must give an output of the same shape as its input.");
        static_assert(std::is_same_v<typename second::output, half>,
                      "revnet_coupling: G must give an output of the same shape as its input.");
        using input = Input;
        using output = Input;
        static constexpr bool reversible = true;
        static constexpr std::size_t forward_flops = first::forward_flops + second::forward_flops + 2 * half::size;
        static constexpr std::size_t backward_flops = first::backward_flops + second::backward_flops + 2 * half::size;
        static constexpr std::size_t winograd_forward_flops =
            winograd_forward_flops_of<first>() + winograd_forward_flops_of<second>();

        // y1 (G's input, which backward needs), F's workspace, G's workspace.
        static constexpr std::size_t workspace_size(std::size_t batch)
        {
            return batch * half::size + first::workspace_size(batch) + second::workspace_size(batch);
        }

        template <forward_pass Pass, class T>
        static void forward(Pass mode, parameters_view<T, parameter_count> parameters,
                            state_view<Pass, T, state_count> state, const_batch<T, input> x, batch_view<T, output> y,
                            std::span<T> workspace)
        {
            const workspace_layout<T> at{workspace, x.batch()};
            const auto [x1, x2] = std::pair(x.first_half(), x.second_half());
            const auto [y1, y2] = std::pair(y.first_half(), y.second_half());
            // y1 = F(x2) + x1, y2 = G(y1) + x2: each addition in its function's last pass.
            forward_onto_of<first>(mode, combination::add, parts::template parameters_of<0>(parameters),
                                   parts::template state_of<0>(state), x2, x1, y1, at.first_workspace());
            forward_onto_of<second>(mode, combination::add, parts::template parameters_of<1>(parameters),
                                    parts::template state_of<1>(state), y1, x2, y2, at.second_workspace());
            copy_batch<T>(y1, at.first_output());
        }

        // y1 goes to the workspace; G may write y2.
        static constexpr bool recomputation_writes_output() { return petra::recomputation_writes_output<second>(); }
        // What backward needs of a recomputation (recompute_for_backward_of,
        // layers/layer.hpp): y1 = F(x2) + x1 written where backward reads it
        // (G's input), then G's, without y2.
        template <class T>
        static void recompute_for_backward(pass::recomputation_t mode, parameters_view<T, parameter_count> parameters,
                                           state_view<pass::recomputation_t, T, state_count> state,
                                           const_batch<T, input> x, batch_view<T, output> y, std::span<T> workspace)
        {
            const workspace_layout<T> at{workspace, x.batch()};
            forward_onto_of<first>(mode, combination::add, parts::template parameters_of<0>(parameters),
                                   parts::template state_of<0>(state), x.second_half(), x.first_half(),
                                   at.first_output(), at.first_workspace());
            recompute_for_backward_of<second>(mode, parts::template parameters_of<1>(parameters),
                                              parts::template state_of<1>(state), at.first_output(), y.second_half(),
                                              at.second_workspace());
        }

        template <class T>
        static void inverse(parameters_view<T, parameter_count> parameters,
                            state_view<pass::recomputation_t, T, state_count> state, const_batch<T, output> y,
                            batch_view<T, input> x, std::span<T> workspace)
        {
            const workspace_layout<T> at{workspace, x.batch()};
            const auto [x1, x2] = std::pair(x.first_half(), x.second_half());
            const auto [y1, y2] = std::pair(y.first_half(), y.second_half());
            // x2 = y2 - G(y1), x1 = y1 - F(x2): each subtraction in its function's last pass.
            forward_onto_of<second>(pass::recomputation, combination::subtract_from,
                                    parts::template parameters_of<1>(parameters), parts::template state_of<1>(state),
                                    y1, y2, x2, at.second_workspace());
            forward_onto_of<first>(pass::recomputation, combination::subtract_from,
                                   parts::template parameters_of<0>(parameters), parts::template state_of<0>(state), x2,
                                   y1, x1, at.first_workspace());
            copy_batch<T>(y1, at.first_output());
        }

        // With g1, g2 the gradients of y1, y2:
        //   dL/dx1 = g1 + J_G(y1)^T g2,   dL/dx2 = g2 + J_F(x2)^T dL/dx1.
        template <class T>
        static void backward(parameters_view<T, parameter_count> parameters, const_batch<T, input> x,
                             const_batch<T, output> grad_y, batch_view<T, input> grad_x,
                             std::span<T, parameter_count> grad_parameters, std::span<T> workspace)
        {
            const workspace_layout<T> at{workspace, x.batch()};
            const auto [g1, g2] = std::pair(grad_y.first_half(), grad_y.second_half());
            const auto [grad_x1, grad_x2] = std::pair(grad_x.first_half(), grad_x.second_half());
            second::backward(parts::template parameters_of<1>(parameters), at.first_output(), g2, grad_x1,
                             parts::template parameters_of<1>(grad_parameters), at.second_workspace());
            kernels::add(grad_x1.size(), grad_x1.data(), g1.data(), grad_x1.data());
            first::backward(parts::template parameters_of<0>(parameters), x.second_half(), grad_x1, grad_x2,
                            parts::template parameters_of<0>(grad_parameters), at.first_workspace());
            kernels::add(grad_x2.size(), grad_x2.data(), g2.data(), grad_x2.data());
        }

    private:
        template <class T>
        struct workspace_layout {
            std::span<T> all;
            std::size_t batch;
            batch_view<T, half> first_output() const { return {all.data(), batch}; }
            std::span<T> first_workspace() const
            {
                return all.subspan(batch * half::size, first::workspace_size(batch));
            }
            std::span<T> second_workspace() const
            {
                return all.subspan(batch * half::size + first::workspace_size(batch), second::workspace_size(batch));
            }
        };
    };
};

} // namespace petra
