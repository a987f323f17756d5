// What a block is (floor 4). Blocks are the units a network is a list of and
// the pipeline cuts into stages. The state between blocks of a reversible
// network is a pair of halves (x, x~) of one shape; a batch of it is stored
// half-major: the first half of every example (an ordinary NCHW batch), then
// the second half of every example, so that a layer chain can run on either
// half directly.
//
// A bound reversible block B (layer_for<Block, Input>) provides:
//   using input = halves<...>;  using output = halves<...>;
//   static constexpr bool reversible = true;
//   static constexpr std::size_t parameter_count, state_count;
//   static constexpr std::size_t forward_flops;   per example
//   static constexpr std::size_t backward_flops;  per example, reconstruction included
//   static constexpr std::size_t workspace_size(std::size_t batch);  scratch of one call
//   template <class T> static void initialize(T* parameters, T* state, std::mt19937_64&);
//   template <class T> static void forward(pass, std::size_t batch, const T* parameters, T* state,
//                                          const T* x, T* y, T* workspace);
//   template <class T> static void inverse(std::size_t batch, const T* parameters, T* state,
//                                          const T* y, T* x, T* workspace);
//   template <class T> static void reconstruct_backward(std::size_t batch, const T* parameters, T* state,
//                                          const T* y, const T* grad_y, T* x, T* grad_x,
//                                          T* grad_parameters, T* workspace);
// inverse and reconstruct_backward recompute with the CURRENT parameters and
// never touch running statistics (pass::recomputation). reconstruct_backward
// writes the reconstructed input to x, the input gradient to grad_x, and adds
// the parameter gradient to grad_parameters.
//
// A bound block that changes shape cannot be inverted; it keeps (through its
// caller) the input of each forward and recomputes from it:
//   static constexpr bool reversible = false;
//   the same counts, workspace_size, initialize and forward, and
//   template <class T> static void backward(std::size_t batch, const T* parameters, T* state,
//                                           const T* x, const T* grad_y, T* grad_x,
//                                           T* grad_parameters, T* workspace);
// backward recomputes the forward from x (pass::recomputation), overwrites
// grad_x and adds to grad_parameters.
#pragma once

#include <algorithm>
#include <cstddef>
#include <random>
#include <type_traits>

#include <petra/shape.hpp>

namespace petra {

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

} // namespace petra
