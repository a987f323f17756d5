// What a block is (floor 4). Blocks are the units a network is a list of and
// the pipeline cuts into stages; the state between blocks of a reversible
// network is a pair of halves (x, x~) of one shape, stored half-major
// (shape.hpp). Every block type derives from block_kind and states the
// inputs it accepts; bound with layer_for<Block, Input> it provides what a
// bound layer does, plus `reversible` and, when that is true, `inverse`
// (reconstruct x from y with the parameters given, leaving in the workspace
// what backward needs, exactly as a forward from x would). The contract is
// written once, in docs/layers-and-blocks.md ("The block contract"); this
// file checks it (bound_block, first_unmet_requirement_of_block) and gives
// the two backward paths every caller uses: reconstruct_backward (inverse,
// then backward) and recompute_backward (forward from the kept input, then
// backward).
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <random>
#include <span>
#include <type_traits>

#include <petra/batch_view.hpp>
#include <petra/layers/chain.hpp>
#include <petra/layers/contract.hpp>
#include <petra/layers/layer.hpp>
#include <petra/layers/parts.hpp>
#include <petra/shape.hpp>
#include <petra/type_list.hpp>

namespace petra {

// Base of every block type (docs/layers-and-blocks.md, the block contract).
struct block_kind {};

template <class T>
concept a_block = std::is_base_of_v<block_kind, T>;

// Whether Block can be bound to Input (see layer_accepts for layers).
template <class Block, class Input>
constexpr bool block_accepts()
{
    return Block::template accepts<Input>;
}

// The shape of one half of a pair. Any other input is rejected with one
// sentence, before anything else is read from it (a block names half_of in
// its base clause, which the compiler instantiates first).
template <class Input>
struct half_of {
    static_assert(is_halves<Input>::value, "This block's input must be a pair of halves, halves<shape<C, H, W>>.");
    using type = shape<1>;
};
template <class Half>
struct half_of<halves<Half>> {
    using type = Half;
};

// Whether Block's backward may skip the input gradient (grad_x null).
template <class Block>
constexpr bool input_gradient_optional()
{
    if constexpr (requires { Block::input_gradient_optional; }) {
        return Block::input_gradient_optional;
    } else {
        return false;
    }
}

// Whether Block passes its input's first half on unchanged as its output's
// second half, and its output gradient's first half as its input gradient's
// second half (static constexpr bool passes_first_half_through; the additive
// coupling's y~ = x and dL/dx~ = dL/dy). Such a block copies that half only
// where its buffers do not already share it: callers that lay out their
// buffers for it (boundary_layout.hpp) save the copies.
template <class Block>
concept passes_first_half_through_of = bool(Block::passes_first_half_through);

// Whether Input is a pair of halves that each of Functions... accepts.
template <class Input, class... Functions>
constexpr bool halves_accepted_by()
{
    if constexpr (!is_halves<Input>::value) {
        return false;
    } else {
        return (layer_accepts<Functions, typename Input::half>() && ...);
    }
}

// The two halves side by side along the channels: one shape of 2C channels.
template <class Input>
using concatenated_halves =
    shape<2 * half_of<Input>::type::channels, half_of<Input>::type::height, half_of<Input>::type::width>;

// Between the NCHW layout of a batch with 2C channels per example and the
// half-major layout of halves of C channels: channels [0, C) of every example
// form the first half, channels [C, 2C) the second.
template <class Half, class T>
void split_into_halves(const_batch<T, concatenated_halves<halves<Half>>> whole, batch_view<T, halves<Half>> pair)
{
    const std::size_t batch = pair.batch();
    const T* from = whole.data();
    T* first = pair.first_half().data();
    T* second = pair.second_half().data();
    for (std::size_t n = 0; n < batch; ++n) {
        std::copy_n(from + 2 * n * Half::size, Half::size, first + n * Half::size);
        std::copy_n(from + (2 * n + 1) * Half::size, Half::size, second + n * Half::size);
    }
}

template <class Half, class T>
void merge_halves(const_batch<T, halves<Half>> pair, batch_view<T, concatenated_halves<halves<Half>>> whole)
{
    const std::size_t batch = pair.batch();
    const T* first = pair.first_half().data();
    const T* second = pair.second_half().data();
    T* to = whole.data();
    for (std::size_t n = 0; n < batch; ++n) {
        std::copy_n(first + n * Half::size, Half::size, to + 2 * n * Half::size);
        std::copy_n(second + n * Half::size, Half::size, to + (2 * n + 1) * Half::size);
    }
}

// The requirements of the block contract (docs/layers-and-blocks.md), in the order they are
// checked: the network checks each block it binds, and reports the first
// one a block fails in one sentence (block_contract).
enum class block_requirement {
    met,
    binds,
    shapes,
    reversible,
    parameter_count,
    state_count,
    forward_flops,
    backward_flops,
    workspace_size,
    initialize,
    forward,
    backward,
    inverse,
    passes_half,
};

namespace detail {

// The first requirement a bound block B fails, or met (the requirements it
// shares with layers are layers/contract.hpp's).
template <class B>
constexpr block_requirement first_unmet_requirement_of_block()
{
    if constexpr (!(requires { typename B::input; }) || !(requires { typename B::output; })) {
        return block_requirement::shapes;
    } else if constexpr (!an_example_shape<typename B::input> || !an_example_shape<typename B::output>) {
        return block_requirement::shapes;
    } else if constexpr (!requires { requires std::convertible_to<decltype(B::reversible), bool>; }) {
        return block_requirement::reversible;
    } else if constexpr (!states_parameter_count<B>) {
        return block_requirement::parameter_count;
    } else if constexpr (!states_state_count<B>) {
        return block_requirement::state_count;
    } else if constexpr (!states_forward_flops<B>) {
        return block_requirement::forward_flops;
    } else if constexpr (!states_backward_flops<B>) {
        return block_requirement::backward_flops;
    } else if constexpr (!states_workspace_size<B>) {
        return block_requirement::workspace_size;
    } else if constexpr (!initializes<B>) {
        return block_requirement::initialize;
    } else if constexpr (!runs_forward<B>) {
        return block_requirement::forward;
    } else if constexpr (!runs_backward<B>) {
        return block_requirement::backward;
    } else if constexpr (B::reversible &&
                         !requires(std::span<float, B::parameter_count> parameters,
                                   std::span<float, B::state_count> state, batch_view<float, typename B::input> x,
                                   batch_view<float, typename B::output> y,
                                   std::span<float> workspace) { B::inverse(parameters, state, y, x, workspace); }) {
        return block_requirement::inverse;
    } else if constexpr (passes_first_half_through_of<B> && !(is_halves<typename B::input>::value &&
                                                              std::is_same_v<typename B::input, typename B::output>)) {
        return block_requirement::passes_half;
    } else {
        return block_requirement::met;
    }
}

} // namespace detail

// The contract, as a concept of bound blocks (checked with float values).
template <class B>
concept bound_block = (detail::first_unmet_requirement_of_block<B>() == block_requirement::met);

// The first requirement Block, bound to Input, fails, or met.
template <class Block, class Input>
constexpr block_requirement first_unmet_block_requirement()
{
    if constexpr (!requires { typename Block::template bind<Input>; }) {
        return block_requirement::binds;
    } else {
        return detail::first_unmet_requirement_of_block<typename Block::template bind<Input>>();
    }
}

// The check, with one sentence per requirement: only the first one Block
// fails is reported. Its template arguments name the block and its input.
template <class Block, class Input, block_requirement Unmet = first_unmet_block_requirement<Block, Input>()>
struct block_contract {
    static constexpr bool value = Unmet == block_requirement::met;
    static_assert(Unmet != block_requirement::binds,
                  "This block has no member template bind<Input>: the block contract (blocks/block.hpp) binds "
                  "every block to the shape of its input.");
    static_assert(Unmet != block_requirement::shapes,
                  "This block's bind<Input> gives no input and output shapes: the block contract (blocks/block.hpp) "
                  "asks for using input and using output, each a shape or a pair of halves.");
    static_assert(Unmet != block_requirement::reversible,
                  "This block does not say whether it is reversible: the block contract (blocks/block.hpp) asks for "
                  "static constexpr bool reversible.");
    static_assert(Unmet != block_requirement::parameter_count,
                  "This block states no parameter_count: the block contract (blocks/block.hpp) asks for static "
                  "constexpr std::size_t parameter_count.");
    static_assert(Unmet != block_requirement::state_count,
                  "This block states no state_count: the block contract (blocks/block.hpp) asks for static "
                  "constexpr std::size_t state_count.");
    static_assert(Unmet != block_requirement::forward_flops,
                  "This block states no forward_flops: the block contract (blocks/block.hpp) asks for static "
                  "constexpr std::size_t forward_flops.");
    static_assert(Unmet != block_requirement::backward_flops,
                  "This block states no backward_flops: the block contract (blocks/block.hpp) asks for static "
                  "constexpr std::size_t backward_flops.");
    static_assert(Unmet != block_requirement::workspace_size,
                  "This block states no workspace_size(batch): the block contract (blocks/block.hpp) asks for "
                  "static constexpr std::size_t workspace_size(std::size_t batch).");
    static_assert(Unmet != block_requirement::initialize,
                  "This block's initialize cannot be called as the block contract (blocks/block.hpp) calls it: "
                  "initialize(std::span<T, parameter_count>, std::span<T, state_count>, std::mt19937_64&).");
    static_assert(Unmet != block_requirement::forward,
                  "This block's forward cannot be called as the block contract (blocks/block.hpp) calls it: "
                  "forward(pass, parameters, state, x, y, workspace), x and y batch views, for every pass.");
    static_assert(Unmet != block_requirement::backward,
                  "This block's backward cannot be called as the block contract (blocks/block.hpp) calls it: "
                  "backward(parameters, x, grad_y, grad_x, grad_parameters, workspace), in that order.");
    static_assert(Unmet != block_requirement::inverse,
                  "This block says it is reversible but has no inverse the block contract (blocks/block.hpp) can "
                  "call: inverse(parameters, state, y, x, workspace).");
    static_assert(Unmet != block_requirement::passes_half,
                  "This block says it passes its first half through but does not take and give pairs of halves of "
                  "one shape: the block contract (blocks/block.hpp) asks for input and output both halves<S>.");
};

// The fused reconstruct-and-backward of a reversible block, generated from its
// inverse and backward: from the output y and its gradient, writes the
// reconstructed input to x and the input gradient to grad_x, and adds the
// parameter gradient to grad_parameters, with the parameters it is given.
template <class Block, class T>
void reconstruct_backward(parameters_view<T, Block::parameter_count> parameters,
                          state_view<pass::recomputation_t, T, Block::state_count> state,
                          const_batch<T, typename Block::output> y, const_batch<T, typename Block::output> grad_y,
                          batch_view<T, typename Block::input> x, batch_view<T, typename Block::input> grad_x,
                          std::span<T, Block::parameter_count> grad_parameters, std::span<T> workspace)
{
    static_assert(Block::reversible, "reconstruct_backward needs a reversible block.");
    Block::inverse(parameters, state, y, x, workspace);
    Block::backward(parameters, x, grad_y, grad_x, grad_parameters, workspace);
}

// Backward of a block from its stored input x: the forward again (a
// recomputation pass, so running statistics are only read) as far as
// backward needs it (recompute_for_backward_of, layers/layer.hpp: the
// workspace, not the output, which no one reads; recomputed_y is lent for
// a block that has no lighter way than its forward), then backward.
template <class Block, class T>
void recompute_backward(parameters_view<T, Block::parameter_count> parameters,
                        state_view<pass::recomputation_t, T, Block::state_count> state,
                        const_batch<T, typename Block::input> x, const_batch<T, typename Block::output> grad_y,
                        batch_view<T, typename Block::input> grad_x,
                        std::span<T, Block::parameter_count> grad_parameters, std::span<T> workspace,
                        batch_view<T, typename Block::output> recomputed_y)
{
    recompute_for_backward_of<Block>(pass::recomputation, parameters, state, x, recomputed_y, workspace);
    Block::backward(parameters, x, grad_y, grad_x, grad_parameters, workspace);
}

} // namespace petra
