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
#pragma once

#include <cstddef>

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

} // namespace petra
