// The layer contract (docs/layers-and-blocks.md) checked at every door a layer enters by:
// a chain's layers, and the functions of every block (a coupling's F and G,
// a stem's, a downsampling's, a head's). A layer that breaks it stops the
// compiler with one sentence that names the requirement it fails first, in
// the contract's order:
//
//   binds            a member template bind<Input>
//   shapes           bind<Input>'s input and output are shapes
//   parameter_count  static constexpr std::size_t parameter_count
//   state_count      static constexpr std::size_t state_count
//   workspace_size       static constexpr std::size_t workspace_size(std::size_t batch)
//   forward_flops    static constexpr std::size_t forward_flops
//   backward_flops   static constexpr std::size_t backward_flops
//   initialize       initialize(parameters, state, generator)
//   forward          forward(pass, parameters, state, x, y, workspace), for each pass
//   backward         backward(parameters, x, grad_y, grad_x, grad_parameters, workspace)
//
// and the layer's type stands in the template arguments of layer_contract,
// which the compiler prints with the sentence. Where a layer fails, its
// door binds a stand-in that does nothing (broken_layer) instead, so that
// nothing else is reported.
#pragma once

#include <concepts>
#include <cstddef>
#include <random>
#include <span>
#include <type_traits>

#include <petra/batch_view.hpp>
#include <petra/layers/layer.hpp>
#include <petra/shape.hpp>

namespace petra {

// The requirements of the layer contract, in the order they are checked.
enum class layer_requirement {
    met,
    binds,
    shapes,
    parameter_count,
    state_count,
    workspace_size,
    forward_flops,
    backward_flops,
    initialize,
    forward,
    backward,
};

namespace detail {

// The requirements layers and blocks share (blocks/block.hpp checks its
// own with them too), each of a bound type B, with float values.
template <class Value>
concept a_size = std::convertible_to<Value, std::size_t>;
template <class B>
concept states_parameter_count = (requires { requires a_size<decltype(B::parameter_count)>; });
template <class B>
concept states_state_count = (requires { requires a_size<decltype(B::state_count)>; });
template <class B>
concept states_workspace_size = (requires { requires a_size<decltype(B::workspace_size(std::size_t{1}))>; });
template <class B>
concept states_forward_flops = (requires { requires a_size<decltype(B::forward_flops)>; });
template <class B>
concept states_backward_flops = (requires { requires a_size<decltype(B::backward_flops)>; });
template <class B>
concept initializes = (requires(std::span<float, B::parameter_count> parameters, std::span<float, B::state_count> state,
                                std::mt19937_64& generator) { B::initialize(parameters, state, generator); });
template <class B>
concept runs_forward = requires(std::span<float, B::parameter_count> parameters, std::span<float, B::state_count> state,
                                batch_view<float, typename B::input> x, batch_view<float, typename B::output> y,
                                std::span<float> workspace)
{
    B::forward(pass::training, parameters, state, x, y, workspace);
    B::forward(pass::recomputation, parameters, state, x, y, workspace);
    B::forward(pass::inference, parameters, state, x, y, workspace);
};
template <class B>
concept runs_backward = (requires(std::span<float, B::parameter_count> parameters,
                                  batch_view<float, typename B::input> x, batch_view<float, typename B::output> y,
                                  std::span<float> workspace) {
    B::backward(parameters, x, y, x, parameters, workspace);
});

// The first requirement a bound layer B fails, or met.
template <class B>
constexpr layer_requirement first_unmet_requirement_of_bound()
{
    if constexpr (!(requires { typename B::input; }) || !(requires { typename B::output; })) {
        return layer_requirement::shapes;
    } else if constexpr (!a_shape<typename B::input> || !a_shape<typename B::output>) {
        return layer_requirement::shapes;
    } else if constexpr (!states_parameter_count<B>) {
        return layer_requirement::parameter_count;
    } else if constexpr (!states_state_count<B>) {
        return layer_requirement::state_count;
    } else if constexpr (!states_workspace_size<B>) {
        return layer_requirement::workspace_size;
    } else if constexpr (!states_forward_flops<B>) {
        return layer_requirement::forward_flops;
    } else if constexpr (!states_backward_flops<B>) {
        return layer_requirement::backward_flops;
    } else if constexpr (!initializes<B>) {
        return layer_requirement::initialize;
    } else if constexpr (!runs_forward<B>) {
        return layer_requirement::forward;
    } else if constexpr (!runs_backward<B>) {
        return layer_requirement::backward;
    } else {
        return layer_requirement::met;
    }
}

} // namespace detail

// The contract, as a concept of bound layers (checked with float values):
//   static_assert(bound_layer<layer_for<my_layer, shape<8>>>);
template <class B>
concept bound_layer = (detail::first_unmet_requirement_of_bound<B>() == layer_requirement::met);

// The first requirement Layer, bound to Input, fails, or met.
template <class Layer, class Input>
constexpr layer_requirement first_unmet_layer_requirement()
{
    if constexpr (!requires { typename Layer::template bind<Input>; }) {
        return layer_requirement::binds;
    } else {
        return detail::first_unmet_requirement_of_bound<typename Layer::template bind<Input>>();
    }
}

// The check, with one sentence per requirement: only the first one Layer
// fails is reported. Its template arguments name the layer and its input.
template <class Layer, class Input, layer_requirement Unmet = first_unmet_layer_requirement<Layer, Input>()>
struct layer_contract {
    static constexpr bool value = Unmet == layer_requirement::met;
    static_assert(Unmet != layer_requirement::binds,
                  "This layer has no member template bind<Input>: the layer contract (layers/layer.hpp) binds "
                  "every layer to the shape of its input.");
    static_assert(Unmet != layer_requirement::shapes,
                  "This layer's bind<Input> gives no input and output shapes: the layer contract "
                  "(layers/layer.hpp) asks for using input = shape<...> and using output = shape<...>.");
    static_assert(Unmet != layer_requirement::parameter_count,
                  "This layer states no parameter_count: the layer contract (layers/layer.hpp) asks for static "
                  "constexpr std::size_t parameter_count.");
    static_assert(Unmet != layer_requirement::state_count,
                  "This layer states no state_count: the layer contract (layers/layer.hpp) asks for static "
                  "constexpr std::size_t state_count.");
    static_assert(Unmet != layer_requirement::workspace_size,
                  "This layer states no workspace_size(batch): the layer contract (layers/layer.hpp) asks for static "
                  "constexpr std::size_t workspace_size(std::size_t batch).");
    static_assert(Unmet != layer_requirement::forward_flops,
                  "This layer states no forward_flops: the layer contract (layers/layer.hpp) asks for static "
                  "constexpr std::size_t forward_flops.");
    static_assert(Unmet != layer_requirement::backward_flops,
                  "This layer states no backward_flops: the layer contract (layers/layer.hpp) asks for static "
                  "constexpr std::size_t backward_flops.");
    static_assert(Unmet != layer_requirement::initialize,
                  "This layer's initialize cannot be called as the layer contract (layers/layer.hpp) calls it: "
                  "initialize(std::span<T, parameter_count>, std::span<T, state_count>, std::mt19937_64&).");
    static_assert(Unmet != layer_requirement::forward,
                  "This layer's forward cannot be called as the layer contract (layers/layer.hpp) calls it: "
                  "forward(pass, parameters, state, x, y, workspace), x and y batch views, for every pass.");
    static_assert(Unmet != layer_requirement::backward,
                  "This layer's backward cannot be called as the layer contract (layers/layer.hpp) calls it: "
                  "backward(parameters, x, grad_y, grad_x, grad_parameters, workspace), in that order, x, grad_y and "
                  "grad_x batch views.");
};

// What a door binds in place of a layer that breaks the contract: a layer
// that does nothing, from Input to the layer's own output shape where it
// states one (so that the block's shape checks still hold), else to Input.
template <class Input, class Output>
struct broken_layer : parameter_free {
    using input = Input;
    using output = Output;
    static constexpr std::size_t forward_flops = 0;
    static constexpr std::size_t backward_flops = 0;
    template <forward_pass Pass, class T>
    static void forward(Pass, parameters_view<T, 0>, state_view<Pass, T, 0>, const_batch<T, input>,
                        batch_view<T, output>, std::span<T>)
    {}
    template <class T>
    static void backward(parameters_view<T, 0>, const_batch<T, input>, const_batch<T, output>, batch_view<T, input>,
                         std::span<T, 0>, std::span<T>)
    {}
};

namespace detail {

template <class Layer, class Input, bool Met>
struct checked_binding {
    using type = layer_for<Layer, Input>;
};
template <class Layer, class Input>
struct checked_binding<Layer, Input, false> {
    static constexpr bool has_output = requires { typename Layer::template bind<Input>::output; };
    template <bool HasOutput, class = void>
    struct output_of {
        using type = Input;
    };
    template <class Unused>
    struct output_of<true, Unused> {
        using type = std::conditional_t<a_shape<typename Layer::template bind<Input>::output>,
                                        typename Layer::template bind<Input>::output, Input>;
    };
    using type = broken_layer<Input, typename output_of<has_output>::type>;
};

} // namespace detail

// Layer bound to Input at a door (a block's function), checked: the bound
// layer, or, for a layer that breaks the contract, its one sentence and a
// stand-in (broken_layer).
template <class Layer, class Input>
using checked_layer_for = typename detail::checked_binding<Layer, Input, layer_contract<Layer, Input>::value>::type;

} // namespace petra
