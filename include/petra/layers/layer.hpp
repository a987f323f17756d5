// What a layer is. A layer type (dense<16, 10>, relu, ...) describes an
// operation; bound to the shape of its input with layer_for<Layer, Input>, it
// becomes a type with everything fixed at compile time: output shape,
// parameter count, FLOPs, and static forward and backward functions templated
// on the value type. Networks and chains bind their layers one after another,
// so that relu or batch_norm need not repeat the shape they see.
//
// A bound layer B provides:
//   using input = shape<...>;  using output = shape<...>;
//   static constexpr std::size_t parameter_count;  trained values
//   static constexpr std::size_t state_count;      untrained buffers (running statistics)
//   static constexpr std::size_t cache_size(std::size_t batch);
//                                                  values forward leaves for backward
//   static constexpr std::size_t forward_flops;    per example
//   static constexpr std::size_t backward_flops;   per example, input and parameter gradients
//   template <class T> static void initialize(T* parameters, T* state, std::mt19937_64& generator);
//   template <class T> static void forward(pass, std::size_t batch, const T* parameters, T* state,
//                                          const T* x, T* y, T* cache);
//   template <class T> static void backward(std::size_t batch, const T* parameters, const T* x,
//                                           T* cache, const T* grad_y, T* grad_x, T* grad_parameters);
// x is batch * input::size values, y batch * output::size. backward receives
// the x and cache of the forward call it differentiates, and consumes the
// cache (it may overwrite it: a chain keeps its backward scratch there); it
// overwrites grad_x and ADDS to grad_parameters, so that gradients accumulate
// over micro-batches. grad_x may be null: the input gradient is then not
// computed (the first layer of a network, whose input is data).
#pragma once

#include <cmath>
#include <concepts>
#include <cstddef>
#include <random>

#include <petra/shape.hpp>

namespace petra {

// What a forward call is for.
enum class pass {
    training,      // batch statistics; running statistics are updated
    recomputation, // batch statistics, running statistics untouched: a
                   // reconstruction recomputes a forward already counted
    inference,     // running statistics
};

template <class Layer, class Input>
using layer_for = typename Layer::template bind<Input>;

// Whether Layer can be bound to Input, decided without binding it, so without
// setting off the layer's own static_assert: a network asks this of each
// block before binding it, to report a mismatch between two blocks in one
// sentence. A layer that constrains its input states it as
//   template <class Input> static constexpr bool accepts = ...;
// a layer that states nothing accepts every shape.
template <class Layer, class Input>
constexpr bool layer_accepts()
{
    if constexpr (!a_shape<Input>) {
        return false;
    } else if constexpr (requires { Layer::template accepts<Input>; }) {
        return Layer::template accepts<Input>;
    } else {
        return true;
    }
}

template <class B>
concept bound_layer = a_shape<typename B::input> && a_shape<typename B::output> && requires {
    { B::parameter_count } -> std::convertible_to<std::size_t>;
    { B::state_count } -> std::convertible_to<std::size_t>;
    { B::cache_size(std::size_t{1}) } -> std::convertible_to<std::size_t>;
    { B::forward_flops } -> std::convertible_to<std::size_t>;
    { B::backward_flops } -> std::convertible_to<std::size_t>;
};

// Writes, for each of Bound's parameter_count parameters, 1 if it is a weight
// (subject to weight decay) and 0 if not (a bias, a batch-norm scale or
// shift). A bound layer whose weights are its first weight_count parameters
// says so with `static constexpr std::size_t weight_count`; a composite
// (chain, block, network) provides `template <class T> static void
// mark_weights(T* mask)`; a layer with neither has no weights.
template <class Bound, class T>
void mark_weights(T* mask)
{
    if constexpr (requires { Bound::template mark_weights<T>(mask); }) {
        Bound::template mark_weights<T>(mask);
    } else {
        std::size_t weights = 0;
        if constexpr (requires { Bound::weight_count; }) weights = Bound::weight_count;
        for (std::size_t i = 0; i < Bound::parameter_count; ++i) mask[i] = T(i < weights ? 1 : 0);
    }
}

// Base of the bound layers that have no parameters, no state and no cache
// (relu, pooling, flatten): the zero counts and the empty initialisation.
struct parameter_free {
    static constexpr std::size_t parameter_count = 0;
    static constexpr std::size_t state_count = 0;
    static constexpr std::size_t cache_size(std::size_t /*batch*/) { return 0; }

    template <class T>
    static void initialize(T* /*parameters*/, T* /*state*/, std::mt19937_64& /*generator*/)
    {
    }
};

// He initialisation: count values drawn from a normal distribution of mean 0
// and variance 2 / fan_in, the scale that keeps activations of a ReLU network
// from growing or shrinking with depth.
template <class T>
void he_normal(T* values, std::size_t count, std::size_t fan_in, std::mt19937_64& generator)
{
    std::normal_distribution<double> distribution(0.0, std::sqrt(2.0 / static_cast<double>(fan_in)));
    for (std::size_t i = 0; i < count; ++i) values[i] = static_cast<T>(distribution(generator));
}

} // namespace petra
