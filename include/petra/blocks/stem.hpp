// The stem: the layer F (usually a chain) applied to the image, its 2C output
// channels split into a pair of halves of C channels. Not reversible: it keeps
// its input and recomputes from it (see block.hpp).
#pragma once

#include <array>
#include <cstddef>
#include <random>
#include <span>
#include <string_view>

#include <petra/blocks/block.hpp>
#include <petra/layers/contract.hpp>
#include <petra/layers/layer.hpp>

namespace petra {

template <class F>
struct stem : block_kind {
    template <class Input>
    static constexpr bool accepts = layer_accepts<F, Input>();

    template <class Input>
    struct bind : made_of<checked_layer_for<F, Input>> {
        // The parts, their parameters and state end to end (made_of).
        using parts = made_of<checked_layer_for<F, Input>>;
        using parts::parameter_count;
        using parts::state_count;
        using unbound = stem;
        // The names of the parts in the names of the arrays (parameter_names.hpp).
        static constexpr std::array<std::string_view, 1> part_names{"f"};
        using function = checked_layer_for<F, Input>;
        using whole = typename function::output;
        static_assert(whole::channels % 2 == 0, "stem: F must give an even number of channels to split in halves.");
        using input = Input;
        using output = halves<shape<whole::channels / 2, whole::height, whole::width>>;
        static constexpr bool reversible = false;
        // backward accepts a null grad_x (the network's input is data).
        static constexpr bool input_gradient_optional = true;
        static constexpr std::size_t forward_flops = function::forward_flops;
        static constexpr std::size_t backward_flops = function::backward_flops;
        static constexpr std::size_t winograd_forward_flops = winograd_forward_flops_of<function>();

        // F's output (or its gradient) in NCHW, then F's workspace.
        static constexpr std::size_t workspace_size(std::size_t batch)
        {
            return batch * whole::size + function::workspace_size(batch);
        }

        template <forward_pass Pass, class T>
        static void forward(Pass mode, parameters_view<T, parameter_count> parameters,
                            state_view<Pass, T, state_count> state, const_batch<T, input> x, batch_view<T, output> y,
                            std::span<T> workspace)
        {
            const batch_view<T, whole> value(workspace.data(), x.batch());
            function::forward(mode, parameters, state, x, value, function_workspace(workspace, x.batch()));
            split_into_halves<half>(value, y);
        }

        // F's output goes to the workspace: the lent output is never written.
        static constexpr bool recomputation_writes_output() { return false; }
        // What backward needs of a recomputation (recompute_for_backward_of,
        // layers/layer.hpp): F's, without the split into halves.
        template <class T>
        static void recompute_for_backward(pass::recomputation_t mode, parameters_view<T, parameter_count> parameters,
                                           state_view<pass::recomputation_t, T, state_count> state,
                                           const_batch<T, input> x, batch_view<T, output> /*y*/, std::span<T> workspace)
        {
            const batch_view<T, whole> value(workspace.data(), x.batch());
            recompute_for_backward_of<function>(mode, parameters, state, x, value,
                                                function_workspace(workspace, x.batch()));
        }

        template <class T>
        static void backward(parameters_view<T, parameter_count> parameters, const_batch<T, input> x,
                             const_batch<T, output> grad_y, batch_view<T, input> grad_x,
                             std::span<T, parameter_count> grad_parameters, std::span<T> workspace)
        {
            // Where forward kept F's output, no longer needed.
            const batch_view<T, whole> gradient(workspace.data(), x.batch());
            merge_halves<half>(grad_y, gradient);
            function::backward(parameters, x, gradient, grad_x, grad_parameters,
                               function_workspace(workspace, x.batch()));
        }

    private:
        using half = typename output::half;

        template <class T>
        static std::span<T> function_workspace(std::span<T> workspace, std::size_t batch)
        {
            return workspace.subspan(batch * whole::size, function::workspace_size(batch));
        }
    };
};

} // namespace petra
