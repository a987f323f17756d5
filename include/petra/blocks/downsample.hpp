// Downsampling between resolutions, on a pair of halves:
//   y = F(x),   y~ = y + G(x~)
// with F and G layers (usually chains) that map one half to the same new
// shape, e.g. F = conv3x3 stride 2, batch norm, ReLU and G = conv1x1 stride 2,
// batch norm (downsampling<C, 2C> below, the reference network's). Not
// reversible: it keeps its input and recomputes from it (see block.hpp).
#pragma once

#include <array>
#include <cstddef>
#include <random>
#include <span>
#include <string_view>
#include <type_traits>

#include <petra/blocks/block.hpp>
#include <petra/kernels/elementwise.hpp>
#include <petra/layers/batch_norm.hpp>
#include <petra/layers/chain.hpp>
#include <petra/layers/contract.hpp>
#include <petra/layers/conv2d.hpp>
#include <petra/layers/layer.hpp>
#include <petra/layers/relu.hpp>

namespace petra {

template <class F, class G>
struct downsample : block_kind {
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
        using unbound = downsample;
        // The names of the parts in the names of the arrays (parameter_names.hpp).
        static constexpr std::array<std::string_view, 2> part_names{"f", "g"};
        using first = checked_layer_for<F, typename half_of<Input>::type>;
        using second = checked_layer_for<G, typename half_of<Input>::type>;
        static_assert(std::is_same_v<typename first::output, typename second::output>,
                      "downsample: F and G must give outputs of the same shape.");
        using input = Input;
        using output = halves<typename first::output>;
        static constexpr bool reversible = false;
        static constexpr std::size_t forward_flops = first::forward_flops + second::forward_flops + output::half::size;
        static constexpr std::size_t backward_flops =
            first::backward_flops + second::backward_flops + output::half::size;
        static constexpr std::size_t winograd_forward_flops =
            winograd_forward_flops_of<first>() + winograd_forward_flops_of<second>();

        // A gradient of one output half, then F's workspace, then G's.
        static constexpr std::size_t workspace_size(std::size_t batch)
        {
            return batch * output::half::size + first::workspace_size(batch) + second::workspace_size(batch);
        }

        template <forward_pass Pass, class T>
        static void forward(Pass mode, parameters_view<T, parameter_count> parameters,
                            state_view<Pass, T, state_count> state, const_batch<T, input> x, batch_view<T, output> y,
                            std::span<T> workspace)
        {
            const workspace_layout<T> at{workspace, x.batch()};
            first::forward(mode, parts::template parameters_of<0>(parameters), parts::template state_of<0>(state),
                           x.first_half(), y.first_half(), at.first_workspace());
            // y~ = G(x~) + y, the addition in G's last pass.
            forward_onto_of<second>(mode, combination::add, parts::template parameters_of<1>(parameters),
                                    parts::template state_of<1>(state), x.second_half(), y.first_half(),
                                    y.second_half(), at.second_workspace());
        }

        static constexpr bool recomputation_writes_output()
        {
            return petra::recomputation_writes_output<first>() || petra::recomputation_writes_output<second>();
        }
        // What backward needs of a recomputation (recompute_for_backward_of,
        // layers/layer.hpp): F's and G's, neither output written unless a
        // function has no lighter way (then into y's halves, lent for it).
        template <class T>
        static void recompute_for_backward(pass::recomputation_t mode, parameters_view<T, parameter_count> parameters,
                                           state_view<pass::recomputation_t, T, state_count> state,
                                           const_batch<T, input> x, batch_view<T, output> y, std::span<T> workspace)
        {
            const workspace_layout<T> at{workspace, x.batch()};
            recompute_for_backward_of<first>(mode, parts::template parameters_of<0>(parameters),
                                             parts::template state_of<0>(state), x.first_half(), y.first_half(),
                                             at.first_workspace());
            recompute_for_backward_of<second>(mode, parts::template parameters_of<1>(parameters),
                                              parts::template state_of<1>(state), x.second_half(), y.second_half(),
                                              at.second_workspace());
        }

        // y~ depends on y, so F receives dL/dy + dL/dy~; G receives dL/dy~.
        template <class T>
        static void backward(parameters_view<T, parameter_count> parameters, const_batch<T, input> x,
                             const_batch<T, output> grad_y, batch_view<T, input> grad_x,
                             std::span<T, parameter_count> grad_parameters, std::span<T> workspace)
        {
            const workspace_layout<T> at{workspace, x.batch()};
            const batch_view<T, typename output::half> gradient = at.gradient();
            kernels::add(gradient.size(), grad_y.first_half().data(), grad_y.second_half().data(), gradient.data());
            first::backward(parts::template parameters_of<0>(parameters), x.first_half(), gradient, grad_x.first_half(),
                            parts::template parameters_of<0>(grad_parameters), at.first_workspace());
            second::backward(parts::template parameters_of<1>(parameters), x.second_half(), grad_y.second_half(),
                             grad_x.second_half(), parts::template parameters_of<1>(grad_parameters),
                             at.second_workspace());
        }

    private:
        template <class T>
        struct workspace_layout {
            std::span<T> all;
            std::size_t batch;
            batch_view<T, typename output::half> gradient() const { return {all.data(), batch}; }
            std::span<T> first_workspace() const
            {
                return all.subspan(batch * output::half::size, first::workspace_size(batch));
            }
            std::span<T> second_workspace() const
            {
                return all.subspan(batch * output::half::size + first::workspace_size(batch),
                                   second::workspace_size(batch));
            }
        };
    };
};

// The reference network's downsampling from C to 2 C channels per half:
// F = conv3x3 stride 2, batch norm, ReLU; G = conv1x1 stride 2, batch norm.
template <std::size_t C, std::size_t Out = 2 * C>
using downsampling =
    downsample<chain<conv2d<C, Out, 3, 2>, batch_norm<Out>, relu>, chain<conv2d<C, Out, 1, 2, 0>, batch_norm<Out>>>;

} // namespace petra
