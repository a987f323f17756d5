// What a block is (floor 4). Blocks are the units a network is a list of and
// the pipeline cuts into stages. The state between blocks of a reversible
// network is a pair of halves (x, x~) of one shape; a batch of it is stored
// half-major: the first half of every example (an ordinary NCHW batch), then
// the second half of every example, so that a layer chain can run on either
// half directly.
//
// Every block type (additive_coupling<F>, stem<F>, ...) derives from
// block_kind, which is how a network tells a block from a layer given in its
// place, and states the inputs it accepts without being bound (so without
// setting off its own static_asserts):
//   template <class Input> static constexpr bool accepts = ...;
//
// Bound to its input with layer_for<Block, Input>, a block B provides:
//   using input = ...;  using output = ...;    shapes or halves
//   static constexpr bool reversible;
//   static constexpr std::size_t parameter_count, state_count;
//   static constexpr std::size_t forward_flops;   per example
//   static constexpr std::size_t backward_flops;  per example, the vector-Jacobian product alone
//   static constexpr std::size_t workspace_size(std::size_t batch);
//   template <class T> static void initialize(T* parameters, T* state, std::mt19937_64&);
//   template <class T> static void forward(pass, std::size_t batch, const T* parameters, T* state,
//                                          const T* x, T* y, T* workspace);
//   template <class T> static void backward(std::size_t batch, const T* parameters, T* state,
//                                           const T* x, const T* grad_y, T* grad_x,
//                                           T* grad_parameters, T* workspace);
// forward leaves in the workspace what backward needs; backward receives the
// x and the workspace of the forward it differentiates (the workspace is
// consumed), overwrites grad_x and ADDS to grad_parameters.
//
// A reversible block (reversible = true, output shape = input shape) also
// provides
//   template <class T> static void inverse(std::size_t batch, const T* parameters, T* state,
//                                          const T* y, T* x, T* workspace);
// which reconstructs x from y with the parameters it is given (pass::
// recomputation: running statistics untouched) and leaves in the workspace
// what backward needs, exactly as a forward from x would. So inverse then
// backward is the fused reconstruct-and-backward that evaluates each function
// once (reconstruct_backward below).
//
// A block that is not reversible keeps (through its caller) its input and
// recomputes from it (recompute_backward below).
//
// A block that can come first in a network (its input is data) may declare
//   static constexpr bool input_gradient_optional = true;
// its backward then accepts a null grad_x and skips the input gradient.
#pragma once

#include <algorithm>
#include <cstddef>
#include <random>
#include <type_traits>

#include <petra/layers/layer.hpp>
#include <petra/shape.hpp>

namespace petra {

// Base of every block type; see the contract above.
struct block_kind {};

template <class T>
concept a_block = std::is_base_of_v<block_kind, T>;

// Whether Block can be bound to Input (see layer_accepts for layers).
template <class Block, class Input>
constexpr bool block_accepts()
{
    return Block::template accepts<Input>;
}

template <class Half>
struct halves {
    static_assert(a_shape<Half>, "halves are made of a shape<C, H, W>.");
    using half = Half;
    // Values of one example: both halves.
    static constexpr std::size_t size = 2 * Half::size;
};

template <class T>
struct is_halves : std::false_type {};
template <class Half>
struct is_halves<halves<Half>> : std::true_type {};

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

// Base of a bound block that applies the bound layers Functions...: its
// parameters and its state are theirs, in that order, end to end, and so is
// its initialisation.
template <class... Functions>
struct made_of {
    static constexpr std::size_t parameter_count = (Functions::parameter_count + ...);
    static constexpr std::size_t state_count = (Functions::state_count + ...);

    template <class T>
    static void initialize(T* parameters, T* state, std::mt19937_64& generator)
    {
        ((Functions::initialize(parameters, state, generator), parameters += Functions::parameter_count,
          state += Functions::state_count),
         ...);
    }

    template <class T>
    static void mark_weights(T* mask)
    {
        ((petra::mark_weights<Functions>(mask), mask += Functions::parameter_count), ...);
    }
};

// Between the NCHW layout of a batch with 2C channels per example and the
// half-major layout of halves of C channels: channels [0, C) of every example
// form the first half, channels [C, 2C) the second.
template <class T>
void split_into_halves(std::size_t batch, std::size_t half_size, const T* whole, T* pair)
{
    for (std::size_t n = 0; n < batch; ++n) {
        std::copy(whole + 2 * n * half_size, whole + (2 * n + 1) * half_size, pair + n * half_size);
        std::copy(whole + (2 * n + 1) * half_size, whole + (2 * n + 2) * half_size, pair + (batch + n) * half_size);
    }
}

template <class T>
void merge_halves(std::size_t batch, std::size_t half_size, const T* pair, T* whole)
{
    for (std::size_t n = 0; n < batch; ++n) {
        std::copy(pair + n * half_size, pair + (n + 1) * half_size, whole + 2 * n * half_size);
        std::copy(pair + (batch + n) * half_size, pair + (batch + n + 1) * half_size, whole + (2 * n + 1) * half_size);
    }
}

// The fused reconstruct-and-backward of a reversible block, generated from its
// inverse and backward: from the output y and its gradient, writes the
// reconstructed input to x and the input gradient to grad_x, and adds the
// parameter gradient to grad_parameters, with the parameters it is given.
template <class Block, class T>
void reconstruct_backward(std::size_t batch, const T* parameters, T* state, const T* y, const T* grad_y, T* x,
                          T* grad_x, T* grad_parameters, T* workspace)
{
    static_assert(Block::reversible, "reconstruct_backward needs a reversible block.");
    Block::inverse(batch, parameters, state, y, x, workspace);
    Block::backward(batch, parameters, state, static_cast<const T*>(x), grad_y, grad_x, grad_parameters, workspace);
}

// Backward of a block from its stored input x: the forward again (pass::
// recomputation, so running statistics are untouched), its output to
// recomputed_y (batch * output::size values, then unused), then backward.
template <class Block, class T>
void recompute_backward(std::size_t batch, const T* parameters, T* state, const T* x, const T* grad_y,
                        T* grad_x, T* grad_parameters, T* workspace, T* recomputed_y)
{
    Block::forward(pass::recomputation, batch, parameters, state, x, recomputed_y, workspace);
    Block::backward(batch, parameters, state, x, grad_y, grad_x, grad_parameters, workspace);
}

} // namespace petra
