// chain<Layer...>: layers applied one after another, itself a layer. Binding
// it to an input binds each layer to the output of the one before, so a
// residual function reads like its diagram:
//
//   chain<conv2d<16, 16>, batch_norm<16>, relu, conv2d<16, 16>, batch_norm<16>>
//
// Neighbouring layers that fuse (fusion.hpp: batch_norm then relu) run as
// one layer. Where a layer that maps its output (batch_norm_relu:
// maps_output) is followed by one that takes an input map (conv2d where its
// kernels do: takes_input_map), the first only computes its statistics and
// the second reads the first's input through the first's output map, in
// forward and backward: the output between them is never written nor kept,
// and every number is the same to the bit (the chain decides this at
// compile time; the unfused layers are what tests compare it with). Where
// a layer that can give the batch statistics of its output (conv2d:
// gives_output_statistics) is followed by one that normalises with them
// (batch_norm: takes_input_statistics), the first computes them as it
// writes its output, in the passes that compute batch statistics, and the
// second does not read its input for them: one pass over the activation
// fewer, at the price of their rounding (a convolution in Winograd's form
// gathers them image by image; tests hold the chain to the unfused layers
// within a few units of rounding). Its
// counts and FLOPs are sums over the pack, its parameters and state are its
// layers' arrays placed end to end, and forward and backward are visits of
// its layers' indices; nothing is written per network. The bound layers form
// a type list (type_list.hpp), bound by one left fold.
//
// Cache of a bound chain for a batch (the memory forward leaves to backward):
// the outputs of every layer but the last (and but those read through a
// map), then each layer's own workspace: what exact backprop must store,
// nothing more. The gradients between layers live
// only during backward, in two buffers of per-thread scratch (one pair per
// chain type, grown once to the largest batch, so a steady state allocates
// nothing).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <random>
#include <span>
#include <tuple>
#include <type_traits>
#include <utility>

#include <boost/hana/fold_left.hpp>

#include <petra/batch_view.hpp>
#include <petra/kernels/input_map.hpp>
#include <petra/kernels/reduction.hpp>
#include <petra/kernels/simd.hpp>
#include <petra/layers/contract.hpp>
#include <petra/layers/fusion.hpp>
#include <petra/layers/layer.hpp>
#include <petra/layers/named_arrays.hpp>
#include <petra/layers/parts.hpp>
#include <petra/type_list.hpp>

namespace petra {

namespace detail {

// The state of the fold that binds a chain's layers: the output so far and
// the bound layers; after a layer that breaks the contract nothing more is
// bound (valid false), so that its sentence stays the only error.
template <bool Valid, class Output, class... Bound>
struct chain_binding {};

inline constexpr auto bind_next_layer = []<bool Valid, class Output, class... Bound, class Layer>(
    chain_binding<Valid, Output, Bound...>, boost::hana::basic_type<Layer>)
{
    if constexpr (!Valid) {
        return chain_binding<false, Output, Bound...>{};
    } else {
        if constexpr (layer_contract<Layer, Output>::value) {
            using bound = layer_for<Layer, Output>;
            return chain_binding<true, typename bound::output, Bound..., bound>{};
        } else {
            return chain_binding<false, Output, Bound...>{};
        }
    }
};

template <class Input, class... Layers>
using bind_chain =
    decltype(boost::hana::fold_left(type_list<Layers...>, chain_binding<true, Input>{}, bind_next_layer));

// A chain binds its layers after fusing neighbours (fusion.hpp).
template <class Input, class Fused>
struct bind_fused;
template <class Input, class... Layers>
struct bind_fused<Input, fused_sequence<Layers...>> {
    using type = bind_chain<Input, Layers...>;
};

// The fusion traits a layer may state (docs/layers-and-blocks.md), false
// where it states none (or states one that does not convert to bool).
template <class Layer>
concept maps_output_of = bool(Layer::maps_output);
template <class Layer>
concept takes_input_map_of = bool(Layer::takes_input_map);
template <class Layer>
concept gives_output_statistics_of = bool(Layer::gives_output_statistics);
template <class Layer>
concept takes_input_statistics_of = bool(Layer::takes_input_statistics);

// Whether Producer's output is left unwritten and Consumer reads
// Producer's input through Producer's output map (top of the file).
template <class Producer, class Consumer>
constexpr bool fuses_through_map()
{
    if constexpr (!(maps_output_of<Producer> && takes_input_map_of<Consumer>)) {
        return false;
    } else if constexpr (!std::is_same_v<typename Producer::input, typename Producer::output>) {
        // One sentence per mistake: the second is not asked after the first.
        static_assert(std::is_same_v<typename Producer::input, typename Producer::output>,
                      "A layer that maps its output (maps_output) must keep its input's shape.");
        return false;
    } else {
        static_assert(
            requires { &Producer::template output_map<float>; },
            "A layer that maps its output (maps_output) must provide output_map and "
            "forward_statistics (docs/layers-and-blocks.md).");
        return true;
    }
}

// Whether Producer's forward gives the batch statistics of its output
// (gives_output_statistics) that Consumer, a batch normalisation, takes
// instead of reading that output for them (takes_input_statistics).
template <class Producer, class Consumer>
constexpr bool fuses_statistics()
{
    if constexpr (!(gives_output_statistics_of<Producer> && takes_input_statistics_of<Consumer>)) {
        return false;
    } else {
        // One sentence per mistake, as in fuses_through_map.
        static_assert(
            requires(std::span<const float, Producer::parameter_count> parameters,
                     std::span<float, Producer::state_count> state, batch_view<const float, typename Producer::input> x,
                     batch_view<float, typename Producer::output> y, std::span<float> workspace) {
                Producer::forward(pass::training, parameters, state, x, y, workspace, kernels::affine_relu_map<float>{},
                                  kernels::channel_statistics<float>{});
            },
            "A layer that gives its output's statistics (gives_output_statistics) must take, after its "
            "workspace, an input map and a kernels::channel_statistics in its forward "
            "(docs/layers-and-blocks.md).");
        // A consumer that maps its output may also be asked for its
        // statistics alone (forward_statistics).
        static_assert(
            requires(std::span<const float, Consumer::parameter_count> parameters,
                     std::span<float, Consumer::state_count> state, batch_view<const float, typename Consumer::input> x,
                     batch_view<float, typename Consumer::output> y, std::span<float> workspace) {
                Consumer::template input_statistics<float>(workspace);
                Consumer::forward(pass::training, parameters, state, x, y, workspace, input_statistics_given);
            } && (!maps_output_of<Consumer> ||
                  requires(std::span<const float, Consumer::parameter_count> parameters,
                           std::span<float, Consumer::state_count> state,
                           batch_view<const float, typename Consumer::input> x, std::span<float> workspace) {
                      Consumer::forward_statistics(pass::training, parameters, state, x, workspace,
                                                   input_statistics_given);
                  }),
            "A layer that takes its input's statistics (takes_input_statistics) must provide input_statistics "
            "and the forwards that take input_statistics_given (docs/layers-and-blocks.md).");
        return true;
    }
}

template <class... Bound>
struct bound_chain : made_of<Bound...> {
    using parts = made_of<Bound...>;
    using parts::parameter_count;
    using parts::state_count;

    static constexpr std::size_t length = sizeof...(Bound);
    static constexpr auto layers = type_list<Bound...>;
    template <std::size_t I>
    using layer = type_at<I, decltype(layers)>;

    // The index in the user's chain<...> of each bound layer's first layer
    // (a fused layer stands for several, named_arrays.hpp): what the
    // arrays' names count by.
    static constexpr std::array<std::size_t, length + 1> layer_positions =
        prefix_sums<length>({layer_span_of<Bound>()...});

    using input = typename layer<0>::input;
    using output = typename layer<length - 1>::output;

    static constexpr std::size_t forward_flops = (Bound::forward_flops + ...);
    static constexpr std::size_t backward_flops = (Bound::backward_flops + ...);
    static constexpr std::size_t winograd_forward_flops = (winograd_forward_flops_of<Bound>() + ...);

    // mapped[i]: layer i's output is never written, layer i + 1 reads layer
    // i's input through layer i's output map (top of the file).
    static constexpr std::array<bool, length> mapped = []<std::size_t... I>(std::index_sequence<I...>)
    {
        return std::array<bool, length>{[]<std::size_t K>(std::integral_constant<std::size_t, K>) {
            if constexpr (K + 1 < length) return fuses_through_map<layer<K>, layer<K + 1>>();
            else return false;
        }(std::integral_constant<std::size_t, I>{})...};
    }
    (std::make_index_sequence<length>{});

    // gives_statistics[i]: layer i's forward writes the batch statistics of
    // its output into layer i + 1's workspace, and layer i + 1 does not read
    // its input for them (top of the file); in the passes that compute batch
    // statistics only (passes_statistics). Not where layer i's output is
    // left unwritten (mapped): it then runs forward_statistics, which gives
    // none.
    static constexpr std::array<bool, length> gives_statistics = []<std::size_t... I>(std::index_sequence<I...>)
    {
        return std::array<bool, length>{[]<std::size_t K>(std::integral_constant<std::size_t, K>) {
            if constexpr (K + 1 < length) return !mapped[K] && fuses_statistics<layer<K>, layer<K + 1>>();
            else return false;
        }(std::integral_constant<std::size_t, I>{})...};
    }
    (std::make_index_sequence<length>{});

    // Offsets, per example, of the outputs kept between layers (layer i's
    // output at intermediate_offsets[i], for i < length - 1; none for a
    // mapped one).
    static constexpr std::array<std::size_t, length> output_sizes{Bound::output::size...};
    static constexpr auto intermediate_offsets = prefix_sums<length>([] {
        std::array<std::size_t, length> kept = output_sizes;
        for (std::size_t i = 0; i < length; ++i) kept[i] = mapped[i] ? 0 : kept[i];
        return kept;
    }());
    static constexpr std::size_t intermediate_size = intermediate_offsets[length - 1];
    static constexpr std::size_t largest_intermediate =
        length == 1 ? 0 : *std::max_element(output_sizes.begin(), output_sizes.end() - 1);

    static constexpr std::size_t workspace_size(std::size_t batch)
    {
        return batch * intermediate_size + (Bound::workspace_size(batch) + ...);
    }

    // Kernel scratch (layer.hpp): the layers' own, one after another, and
    // in backward the chain's two gradient buffers.
    template <class T>
    static constexpr kernels::scratch_demand forward_scratch(std::size_t batch, precision arithmetic = precision::fp32)
    {
        kernels::scratch_demand demand;
        (demand.merge(forward_scratch_of<Bound, T>(batch, arithmetic)), ...);
        return demand;
    }
    template <class T>
    static constexpr kernels::scratch_demand backward_scratch(std::size_t batch, bool input_gradient,
                                                              precision arithmetic = precision::fp32)
    {
        kernels::scratch_demand demand;
        if constexpr (length > 1) demand.template ask<bound_chain, T>(gradient_buffers_size(batch));
        for_each_index<length>([&](auto i) {
            demand.merge(backward_scratch_of<layer<i>, T>(batch, i > 0 || input_gradient, arithmetic));
        });
        return demand;
    }

    template <forward_pass Pass, class T>
    static void forward(Pass mode, parameters_view<T, parameter_count> parameters,
                        state_view<Pass, T, state_count> state, const_batch<T, input> x, batch_view<T, output> y,
                        std::span<T> workspace)
    {
        const workspace_layout<T> at{workspace.data(), x.batch(), nullptr};
        forward_layers<length, Pass, T>(mode, parameters, state, at, x, y);
    }

    // forward with the last layer's output combined with the addend in that
    // layer's own pass where it can (layer.hpp, forward_onto).
    template <forward_pass Pass, class T>
    static void forward_onto(Pass mode, combination how, parameters_view<T, parameter_count> parameters,
                             state_view<Pass, T, state_count> state, const_batch<T, input> x,
                             const_batch<T, output> addend, batch_view<T, output> y, std::span<T> workspace)
    {
        const workspace_layout<T> at{workspace.data(), x.batch(), nullptr};
        constexpr std::size_t last = length - 1;
        if constexpr (length > 1 && mapped[length - 2]) {
            forward_layers<length, Pass, T>(mode, parameters, state, at, x, y);
            combine_with_addend(how, addend, y);
        } else {
            forward_layers<length - 1, Pass, T>(mode, parameters, state, at, x, y);
            const auto last_parameters = parts::template parameters_of<last>(parameters);
            const auto last_state = parts::template state_of<last>(state);
            const auto last_input = at.template input_of<last>(x);
            const auto last_workspace = at.template layer_workspace<last>();
            if constexpr (!receives_statistics<last, Pass>()) {
                forward_onto_of<layer<last>>(mode, how, last_parameters, last_state, last_input, addend, y,
                                             last_workspace);
            } else if constexpr (requires {
                                     layer<last>::forward_onto(mode, how, last_parameters, last_state, last_input,
                                                               addend, y, last_workspace, input_statistics_given);
                                 }) {
                layer<last>::forward_onto(mode, how, last_parameters, last_state, last_input, addend, y, last_workspace,
                                          input_statistics_given);
            } else {
                layer<last>::forward(mode, last_parameters, last_state, last_input, y, last_workspace,
                                     input_statistics_given);
                combine_with_addend(how, addend, y);
            }
        }
    }

    // Whether recompute_for_backward below may write y (layer.hpp): where
    // its last layer has no lighter way than its forward.
    static constexpr bool recomputation_writes_output()
    {
        constexpr std::size_t last = length - 1;
        if constexpr (receives_statistics<last, pass::recomputation_t>()) {
            return !requires(parameters_view<float, layer<last>::parameter_count> p,
                             state_view<pass::recomputation_t, float, layer<last>::state_count> s,
                             batch_view<const float, typename layer<last>::input> x, std::span<float> w)
            {
                layer<last>::forward_statistics(pass::recomputation, p, s, x, w, input_statistics_given);
            };
        } else if constexpr (last > 0 && mapped[last - 1]) {
            return !has_empty_workspace<layer<last>>();
        } else {
            return petra::recomputation_writes_output<layer<last>>();
        }
    }
    // What backward needs of a recomputation's forward (layer.hpp,
    // recompute_for_backward_of): every layer's forward but the last one's,
    // and of the last only what its backward needs. y, lent by the caller,
    // is written only by a last layer that has no lighter way.
    template <class T>
    static void recompute_for_backward(pass::recomputation_t mode, parameters_view<T, parameter_count> parameters,
                                       state_view<pass::recomputation_t, T, state_count> state, const_batch<T, input> x,
                                       batch_view<T, output> y, std::span<T> workspace)
    {
        using Pass = pass::recomputation_t;
        const workspace_layout<T> at{workspace.data(), x.batch(), nullptr};
        constexpr std::size_t last = length - 1;
        forward_layers<last, Pass, T>(mode, parameters, state, at, x, y);
        const auto last_parameters = parts::template parameters_of<last>(parameters);
        const auto last_state = parts::template state_of<last>(state);
        const auto last_input = at.template input_of<last>(x);
        const auto last_workspace = at.template layer_workspace<last>();
        if constexpr (receives_statistics<last, Pass>()) {
            // Its batch statistics are in its workspace already.
            if constexpr (requires {
                              layer<last>::forward_statistics(mode, last_parameters, last_state, last_input,
                                                              last_workspace, input_statistics_given);
                          }) {
                layer<last>::forward_statistics(mode, last_parameters, last_state, last_input, last_workspace,
                                                input_statistics_given);
            } else {
                forward_layer<last>(mode, parameters, state, at, x, y);
            }
        } else if constexpr (last > 0 && mapped[last - 1]) {
            // It reads its input through the map of the layer before.
            if constexpr (has_empty_workspace<layer<last>>()) require_empty_workspace<layer<last>>(x.batch());
            else forward_layer<last>(mode, parameters, state, at, x, y);
        } else {
            recompute_for_backward_of<layer<last>>(mode, last_parameters, last_state, last_input, y, last_workspace);
        }
    }

    // Layers in reverse order; layer i writes the gradient of its input to
    // gradient buffer i % 2, which layer i - 1 reads.
    template <class T>
    static void backward(parameters_view<T, parameter_count> parameters, const_batch<T, input> x,
                         const_batch<T, output> grad_y, batch_view<T, input> grad_x,
                         std::span<T, parameter_count> grad_parameters, std::span<T> workspace)
    {
        const std::size_t batch = x.batch();
        T* gradients = length == 1 ? nullptr : kernels::thread_scratch<bound_chain, T>(gradient_buffers_size(batch));
        const workspace_layout<T> at{workspace.data(), batch, gradients};
        for_each_index_down<length>([&](auto i) {
            if constexpr (i > 0 && mapped[i - 1]) {
                const auto map = producer_map<i - 1, T>(parameters, at);
                layer<i>::backward(parts::template parameters_of<i>(parameters), at.template input_of<i - 1>(x),
                                   at.template output_gradient_of<i>(grad_y), at.template input_gradient_of<i>(grad_x),
                                   parts::template parameters_of<i>(grad_parameters), at.template layer_workspace<i>(),
                                   map.map());
            } else {
                layer<i>::backward(parts::template parameters_of<i>(parameters), at.template input_of<i>(x),
                                   at.template output_gradient_of<i>(grad_y), at.template input_gradient_of<i>(grad_x),
                                   parts::template parameters_of<i>(grad_parameters), at.template layer_workspace<i>());
            }
        });
    }

private:
    // The forward of layers 0 to Count - 1, each from its input into its
    // output (an intermediate in the workspace, or y for the last layer).
    // The trailing arguments of each forward: the input map (a layer that
    // reads its input through the layer before's map, or an empty one
    // before the statistics' destination), the destination of the batch
    // statistics the next layer takes, and input_statistics_given.
    template <std::size_t Count, forward_pass Pass, class T, class Layout>
    static void forward_layers(Pass mode, parameters_view<T, parameter_count> parameters,
                               state_view<Pass, T, state_count> state, const Layout& at, const_batch<T, input> x,
                               batch_view<T, output> y)
    {
        for_each_index<Count>([&](auto i) { forward_layer<i>(mode, parameters, state, at, x, y); });
    }

    // Layer I's forward, as forward_layers runs it.
    template <std::size_t I, forward_pass Pass, class T, class Layout>
    static void forward_layer(Pass mode, parameters_view<T, parameter_count> parameters,
                              state_view<Pass, T, state_count> state, const Layout& at, const_batch<T, input> x,
                              batch_view<T, output> y)
    {
        constexpr bool reads_through_map = I > 0 && mapped[I - 1];
        // The layer whose input this one reads: its own, or the mapped layer's before it.
        constexpr std::size_t source = reads_through_map ? I - 1 : I;
        const auto given = [&] {
            if constexpr (receives_statistics<I, Pass>()) return std::tuple{input_statistics_given};
            else return std::tuple{};
        }();
        if constexpr (mapped[I]) {
            std::apply(
                [&](auto... more) {
                    layer<I>::forward_statistics(mode, parts::template parameters_of<I>(parameters),
                                                 parts::template state_of<I>(state), at.template input_of<I>(x),
                                                 at.template layer_workspace<I>(), more...);
                },
                given);
        } else {
            const auto map = [&] {
                if constexpr (reads_through_map) return producer_map<I - 1, T>(parameters, at);
                else return no_map<T>{};
            }();
            const auto statistics = [&] {
                if constexpr (passes_statistics<I, Pass>()) {
                    return std::tuple{layer<I + 1>::template input_statistics<T>(at.template layer_workspace<I + 1>())};
                } else {
                    return std::tuple{};
                }
            }();
            const auto map_argument = [&] {
                if constexpr (reads_through_map || passes_statistics<I, Pass>()) return std::tuple{map.map()};
                else return std::tuple{};
            }();
            std::apply(
                [&](auto... more) {
                    layer<I>::forward(mode, parts::template parameters_of<I>(parameters),
                                      parts::template state_of<I>(state), at.template input_of<source>(x),
                                      at.template output_of<I>(y), at.template layer_workspace<I>(), more...);
                },
                std::tuple_cat(map_argument, statistics, given));
        }
    }

    // Whether layer I gives the next layer its batch statistics in a pass
    // of type Pass (gives_statistics; passes that normalise with running
    // statistics compute none), and whether layer I takes them so.
    template <std::size_t I, class Pass>
    static constexpr bool passes_statistics()
    {
        return gives_statistics[I] && !Pass::uses_running_statistics;
    }
    template <std::size_t I, class Pass>
    static constexpr bool receives_statistics()
    {
        if constexpr (I > 0) return passes_statistics<I - 1, Pass>();
        else return false;
    }

    // The empty input map, for a forward that reads its input as it is.
    template <class T>
    struct no_map {
        kernels::affine_relu_map<T> map() const { return {}; }
    };

    // The output map of mapped layer I (the next layer reads I's input
    // through it), from I's parameters and the statistics in its workspace.
    template <std::size_t I, class T, class Layout>
    static auto producer_map(parameters_view<T, parameter_count> parameters, const Layout& at)
    {
        return layer<I>::template output_map<T>(parts::template parameters_of<I>(parameters),
                                                at.template layer_workspace<I>());
    }

    // Values of the two buffers backward passes the gradients between
    // layers in.
    static constexpr std::size_t gradient_buffers_size(std::size_t batch) { return 2 * batch * largest_intermediate; }

    // Where a layer finds its input and output (the chain's own, or an
    // intermediate in the workspace), its workspace, and in backward its gradients.
    template <class T>
    struct workspace_layout {
        T* base;
        std::size_t batch;
        T* gradients; // two buffers of batch * largest_intermediate values

        template <std::size_t I>
        batch_view<T, typename layer<I>::output> intermediate() const
        {
            return {base + batch * intermediate_offsets[I], batch};
        }
        template <std::size_t I>
        batch_view<const T, typename layer<I>::input> input_of(batch_view<const T, input> x) const
        {
            if constexpr (I == 0) return x;
            else return intermediate<I - 1>();
        }
        template <std::size_t I>
        batch_view<T, typename layer<I>::output> output_of(batch_view<T, output> y) const
        {
            if constexpr (I + 1 == length) return y;
            else return intermediate<I>();
        }
        template <std::size_t I>
        std::span<T> layer_workspace() const
        {
            constexpr std::array<std::size_t (*)(std::size_t), length> sizes{&Bound::workspace_size...};
            std::size_t offset = batch * intermediate_size;
            for (std::size_t j = 0; j < I; ++j) offset += sizes[j](batch);
            return {base + offset, layer<I>::workspace_size(batch)};
        }
        // Gradient buffer I % 2 holds the gradient of layer I's input.
        template <std::size_t I>
        batch_view<T, typename layer<I>::input> gradient() const
        {
            return {gradients + (I % 2) * batch * largest_intermediate, batch};
        }
        template <std::size_t I>
        batch_view<const T, typename layer<I>::output> output_gradient_of(batch_view<const T, output> grad_y) const
        {
            if constexpr (I + 1 == length) return grad_y;
            else return gradient<I + 1>();
        }
        template <std::size_t I>
        batch_view<T, typename layer<I>::input> input_gradient_of(batch_view<T, input> grad_x) const
        {
            if constexpr (I == 0) return grad_x;
            else return gradient<I>();
        }
    };
};

template <class Input, class Binding>
struct bound_chain_of;
template <class Input, class Output, class... Bound>
struct bound_chain_of<Input, chain_binding<true, Output, Bound...>> {
    using type = bound_chain<Bound...>;
};
template <class Input, class Output, class... Bound>
struct bound_chain_of<Input, chain_binding<false, Output, Bound...>> {
    using type = broken_layer<Input, Output>; // contract.hpp: nothing more is reported
};

// Whether each layer accepts the output of the one before, the first Input.
template <class Input, class First, class... Rest>
constexpr bool chain_accepts()
{
    if constexpr (!layer_accepts<First, Input>()) {
        return false;
    } else if constexpr (sizeof...(Rest) == 0) {
        return true;
    } else {
        return chain_accepts<typename layer_for<First, Input>::output, Rest...>();
    }
}

} // namespace detail

template <class... Layers>
struct chain {
    static_assert(sizeof...(Layers) > 0, "A chain needs at least one layer.");

    template <class Input>
    static constexpr bool accepts = detail::chain_accepts<Input, Layers...>();

    template <class Input>
    using bind =
        typename detail::bound_chain_of<Input,
                                        typename detail::bind_fused<Input, fused_sequence_of<Layers...>>::type>::type;
};

} // namespace petra
