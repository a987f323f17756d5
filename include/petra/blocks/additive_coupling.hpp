// The additive coupling with swap, the reversible block of PETRA:
//   forward:  y = x~ + F(x),  y~ = x
//   inverse:  x = y~,         x~ = y - F(y~)
// where F is any layer (usually a chain) whose output shape equals its input
// shape, the shape of one half.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <random>
#include <span>
#include <string_view>
#include <type_traits>

#include <petra/blocks/block.hpp>
#include <petra/kernels/elementwise.hpp>
#include <petra/layers/contract.hpp>
#include <petra/layers/layer.hpp>

namespace petra {

template <class F>
struct additive_coupling : block_kind {
    template <class Input>
    static constexpr bool accepts = halves_accepted_by<Input, F>();

    template <class Input>
    struct bind : made_of<checked_layer_for<F, typename half_of<Input>::type>> {
        // The parts, their parameters and state end to end (made_of).
        using parts = made_of<checked_layer_for<F, typename half_of<Input>::type>>;
        using parts::parameter_count;
        using parts::state_count;
        using unbound = additive_coupling;
        // The names of the parts in the names of the arrays (parameter_names.hpp).
        static constexpr std::array<std::string_view, 1> part_names{"f"};
        using half = typename half_of<Input>::type;
        using function = checked_layer_for<F, half>;
        static_assert(std::is_same_v<typename function::output, half>,
                      "additive_coupling: F must give an output of the same shape as its input.");
        using input = Input;
        using output = Input;
        static constexpr bool reversible = true;
        // y~ = x and dL/dx~ = dL/dy: each copied only where the buffers do not
        // already share that half (boundary_layout.hpp).
        static constexpr bool passes_first_half_through = true;
        static constexpr std::size_t forward_flops = function::forward_flops + half::size;
        static constexpr std::size_t backward_flops = function::backward_flops + half::size;
        static constexpr std::size_t winograd_forward_flops = winograd_forward_flops_of<function>();

        // F's workspace.
        static constexpr std::size_t workspace_size(std::size_t batch) { return function::workspace_size(batch); }

        template <forward_pass Pass, class T>
        static void forward(Pass mode, parameters_view<T, parameter_count> parameters,
                            state_view<Pass, T, state_count> state, const_batch<T, input> x, batch_view<T, output> y,
                            std::span<T> workspace)
        {
            // y = F(x) + x~ into the first output half, the addition in F's last pass.
            forward_onto_of<function>(mode, combination::add, parameters, state, x.first_half(), x.second_half(),
                                      y.first_half(), workspace);
            copy_unless_shared<T>(x.first_half(), y.second_half());
        }

        static constexpr bool recomputation_writes_output() { return petra::recomputation_writes_output<function>(); }
        // What backward needs of a recomputation (recompute_for_backward_of,
        // layers/layer.hpp; a coupling recomputes where a stage keeps its
        // input): F's, without the addition.
        template <class T>
        static void recompute_for_backward(pass::recomputation_t mode, parameters_view<T, parameter_count> parameters,
                                           state_view<pass::recomputation_t, T, state_count> state,
                                           const_batch<T, input> x, batch_view<T, output> y, std::span<T> workspace)
        {
            recompute_for_backward_of<function>(mode, parameters, state, x.first_half(), y.first_half(), workspace);
        }

        template <class T>
        static void inverse(parameters_view<T, parameter_count> parameters,
                            state_view<pass::recomputation_t, T, state_count> state, const_batch<T, output> y,
                            batch_view<T, input> x, std::span<T> workspace)
        {
            copy_unless_shared<T>(y.second_half(), x.first_half());
            // x~ = y - F(y~) into the second input half, the subtraction in F's last pass.
            forward_onto_of<function>(pass::recomputation, combination::subtract_from, parameters, state,
                                      x.first_half(), y.first_half(), x.second_half(), workspace);
        }

        // With y = x~ + F(x) and y~ = x: dL/dx~ = dL/dy and
        // dL/dx = dL/dy~ + J_F(x)^T dL/dy.
        template <class T>
        static void backward(parameters_view<T, parameter_count> parameters, const_batch<T, input> x,
                             const_batch<T, output> grad_y, batch_view<T, input> grad_x,
                             std::span<T, parameter_count> grad_parameters, std::span<T> workspace)
        {
            function::backward(parameters, x.first_half(), grad_y.first_half(), grad_x.first_half(), grad_parameters,
                               workspace);
            kernels::add(grad_x.first_half().size(), grad_x.first_half().data(), grad_y.second_half().data(),
                         grad_x.first_half().data());
            copy_unless_shared<T>(grad_y.first_half(), grad_x.second_half());
        }
    };
};

} // namespace petra
