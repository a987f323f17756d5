// The names and shapes of a layer's arrays (floor 3), from which a network
// names every array it holds (parameter_names.hpp): what weights files and
// exported graphs are keyed by.
//
// A bound layer with parameters or state names its arrays with
//   static constexpr std::array<layer_array, K> named_arrays{...};
// its parameter arrays first, in the order they lie in its parameters, then
// its state arrays in the order they lie in its state; their sizes add up
// to parameter_count and state_count. The names and shapes are those of the
// same tensors in PyTorch, so that a state_dict's keys are petra's names:
//   conv2d<I, O, K>   weight [O, I, K, K]
//   dense<I, O>       weight [O, I], bias [O]
//   batch_norm<C>     weight [C] (the scale gamma), bias [C] (the shift
//                     beta); state running_mean [C], running_var [C]
// A layer that names nothing is given one array `parameters` [P] and one
// array `state` [S] (those it has).
//
// A fused layer (fusion.hpp) stands for more than one of the user's layers;
// it says how many with
//   static constexpr std::size_t layer_span = 2;
// so that the layers after it keep the indices the user wrote.
#pragma once

#include <array>
#include <cstddef>
#include <string_view>

namespace petra {

// Which of a network's two arrays a named array lives in: the trained
// parameters or the untrained state (running statistics).
enum class array_role : unsigned char { parameter, state };

// One array of a layer: its name (the last part of the full name), where it
// lives and its shape (rank up to 4, extents past the rank unused).
struct layer_array {
    std::string_view name;
    array_role role;
    std::size_t rank;
    std::array<std::size_t, 4> extents;

    constexpr std::size_t size() const
    {
        std::size_t values = 1;
        for (std::size_t axis = 0; axis < rank; ++axis) values *= extents[axis];
        return values;
    }
};

// How many of the user's layers a bound layer stands for: its layer_span,
// 1 where it states none.
template <class Bound>
constexpr std::size_t layer_span_of()
{
    if constexpr (requires { Bound::layer_span; }) {
        return Bound::layer_span;
    } else {
        return 1;
    }
}

} // namespace petra
