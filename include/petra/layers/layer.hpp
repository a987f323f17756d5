// What a layer is (floor 3). A layer type (dense<16, 10>, relu, ...)
// describes an operation; bound to the shape of its input with
// layer_for<Layer, Input>, it becomes a type with everything fixed at compile
// time whose static functions follow the layer contract: its shapes,
// parameter and state counts, workspace, FLOPs, initialize, forward for each
// pass and backward, in one argument order (what the computation is made
// with, what it reads, what it writes, its scratch), NCHW batches, backward
// overwriting grad_x and ADDING to grad_parameters; optionally accepts,
// weight_count, forward_onto and winograd_forward_flops. The contract is
// written once, in docs/layers-and-blocks.md ("The layer contract");
// layers/contract.hpp checks it at every door a layer enters by and names,
// in one sentence, the first requirement a layer fails. This file holds the
// words it is written in: passes, parameter and state views, layer_for,
// combination and forward_onto_of.
#pragma once

#include <cmath>
#include <concepts>
#include <cstddef>
#include <random>
#include <span>
#include <type_traits>

#include <petra/batch_view.hpp>
#include <petra/error.hpp>
#include <petra/kernels/elementwise.hpp>
#include <petra/kernels/scratch.hpp>
#include <petra/layers/precision.hpp>
#include <petra/random.hpp>
#include <petra/shape.hpp>

namespace petra {

// What a forward call is for, as a type, so that what it may write is decided
// at compile time: only a training pass writes the running statistics. A
// pass value also says where the forward's kernels take their scratch,
// kernel_scratch (docs/layers-and-blocks.md, the layer contract): per-thread buffers (empty, as in
// the constants below) or a caller's region, as in
//   pass::inference_t{.kernel_scratch = region}
namespace pass {
// Batch statistics; running statistics updated.
struct training_t {
    static constexpr bool updates_running_statistics = true;
    static constexpr bool uses_running_statistics = false;
    std::span<std::byte> kernel_scratch{};
};
// Batch statistics, running statistics only read: a reconstruction
// recomputes a forward already counted.
struct recomputation_t {
    static constexpr bool updates_running_statistics = false;
    static constexpr bool uses_running_statistics = false;
    std::span<std::byte> kernel_scratch{};
};
// Running statistics, only read.
struct inference_t {
    static constexpr bool updates_running_statistics = false;
    static constexpr bool uses_running_statistics = true;
    std::span<std::byte> kernel_scratch{};
};
inline constexpr training_t training{};
inline constexpr recomputation_t recomputation{};
inline constexpr inference_t inference{};
} // namespace pass

template <class Pass>
concept forward_pass = (std::same_as<Pass, pass::training_t> || std::same_as<Pass, pass::recomputation_t> ||
                        std::same_as<Pass, pass::inference_t>);

// The trained values of a layer or block (Count of them), read-only, as a
// parameter that takes no part in deducing T: a view of T or of const T is
// accepted alike.
template <class T, std::size_t Count>
using parameters_view = std::type_identity_t<std::span<const T, Count>>;

// The running statistics as a forward pass of type Pass sees them: writable
// for a training pass, read-only otherwise (a reconstruction or an inference
// cannot move them, by type). Takes no part in deducing T either.
template <class Pass, class T, std::size_t Count>
using state_view = std::conditional_t<Pass::updates_running_statistics, std::span<T, Count>, std::span<const T, Count>>;

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

// The kernel scratch of Bound's forward, and of its backward, for a batch
// computed in `arithmetic` (layers/precision.hpp; docs/layers-and-blocks.md,
// the layer contract): what it states, in that precision where it takes one,
// or nothing. Bound is a bound layer or block.
template <class Bound, class T>
constexpr kernels::scratch_demand forward_scratch_of(std::size_t batch, precision arithmetic = precision::fp32)
{
    if constexpr (requires { Bound::template forward_scratch<T>(batch, arithmetic); }) {
        return Bound::template forward_scratch<T>(batch, arithmetic);
    } else if constexpr (requires { Bound::template forward_scratch<T>(batch); }) {
        return Bound::template forward_scratch<T>(batch);
    } else {
        return {};
    }
}
template <class Bound, class T>
constexpr kernels::scratch_demand backward_scratch_of(std::size_t batch, bool input_gradient,
                                                      precision arithmetic = precision::fp32)
{
    if constexpr (requires { Bound::template backward_scratch<T>(batch, input_gradient, arithmetic); }) {
        return Bound::template backward_scratch<T>(batch, input_gradient, arithmetic);
    } else if constexpr (requires { Bound::template backward_scratch<T>(batch, input_gradient); }) {
        return Bound::template backward_scratch<T>(batch, input_gradient);
    } else {
        return {};
    }
}

// Writes, for each of Bound's parameter_count parameters, 1 if it is a weight
// (subject to weight decay) and 0 if not (a bias, a batch-norm scale or
// shift). A bound layer whose weights are its first weight_count parameters
// says so with `static constexpr std::size_t weight_count`; a composite
// (chain, block, network) provides `template <class T> static void
// mark_weights(std::span<T, parameter_count> mask)`; a layer with neither has
// no weights.
template <class Bound, class T>
void mark_weights(std::span<T, Bound::parameter_count> mask)
{
    if constexpr (requires { Bound::template mark_weights<T>(mask); }) {
        Bound::template mark_weights<T>(mask);
    } else {
        std::size_t weights = 0;
        if constexpr (requires { Bound::weight_count; }) weights = Bound::weight_count;
        for (std::size_t i = 0; i < Bound::parameter_count; ++i) mask[i] = T(i < weights ? 1 : 0);
    }
}

// Base of the bound layers that have no parameters, no state and no workspace
// (relu, pooling, flatten): the zero counts and the empty initialisation.
struct parameter_free {
    static constexpr std::size_t parameter_count = 0;
    static constexpr std::size_t state_count = 0;
    static constexpr std::size_t workspace_size(std::size_t /*batch*/) { return 0; }

    template <class T>
    static void initialize(std::span<T, 0> /*parameters*/, std::span<T, 0> /*state*/, std::mt19937_64& /*generator*/)
    {}
};

// The last argument of a forward (forward, forward_onto, forward_statistics)
// of a layer that takes its batch statistics from the layer before it
// (takes_input_statistics): they are already in its workspace, where its
// input_statistics said, and the layer does not read its input for them
// (forward_statistics then does not read it at all). A chain passes it
// after a layer that gives them (gives_output_statistics; chain.hpp).
struct input_statistics_given_t {
    explicit input_statistics_given_t() = default;
};
inline constexpr input_statistics_given_t input_statistics_given{};

// How forward_onto combines a layer's output with the addend.
enum class combination {
    add,           // y = forward(x) + addend
    subtract_from, // y = addend - forward(x)
};

// y = y + addend (combination::add) or addend - y (subtract_from), in place:
// what forward_onto folds into a layer's last pass, as a pass of its own.
template <class T, class Shape>
void combine_with_addend(combination how, const_batch<T, Shape> addend, batch_view<T, Shape> y)
{
    if (how == combination::add) {
        kernels::add(y.size(), y.data(), addend.data(), y.data());
    } else {
        kernels::subtract(y.size(), addend.data(), y.data(), y.data());
    }
}

// Bound's forward(x) combined with addend into y (see forward_onto at the
// top of the file): its forward_onto, or its forward and then
// combine_with_addend. y may overlap neither x nor the addend.
template <class Bound, forward_pass Pass, class T>
void forward_onto_of(Pass mode, combination how, parameters_view<T, Bound::parameter_count> parameters,
                     state_view<Pass, T, Bound::state_count> state, const_batch<T, typename Bound::input> x,
                     const_batch<T, typename Bound::output> addend, batch_view<T, typename Bound::output> y,
                     std::span<T> workspace)
{
    if constexpr (requires { Bound::forward_onto(mode, how, parameters, state, x, addend, y, workspace); }) {
        Bound::forward_onto(mode, how, parameters, state, x, addend, y, workspace);
    } else {
        Bound::forward(mode, parameters, state, x, y, workspace);
        combine_with_addend(how, addend, y);
    }
}

// What a recomputation's forward must leave for backward, without the
// output no one reads: a backward takes the input, the output gradient,
// the parameters and the workspace, never forward's output, so a forward
// run again only for the backward that follows (recompute_backward,
// block.hpp) need only fill the workspace, as forward would have, to the
// bit. Bound (a bound layer or block) does it with its own
// recompute_for_backward where it has one (a chain: its layers but the
// last one's output; blocks: their functions'), with forward_statistics
// where it has that (batch norm: the statistics alone), with nothing where
// its workspace is empty (a convolution, a ReLU), and otherwise by its
// forward into y, which the caller lends for that and reads nothing from.
// Whether it may write y at all is recomputation_writes_output<Bound>()
// (where Bound has its own, what its static constexpr bool
// recomputation_writes_output() says, true where it says nothing): a
// caller lends memory only where it may.
template <class Bound>
concept recomputes_for_backward = requires(parameters_view<float, Bound::parameter_count> parameters,
                                           state_view<pass::recomputation_t, float, Bound::state_count> state,
                                           batch_view<const float, typename Bound::input> x,
                                           batch_view<float, typename Bound::output> y, std::span<float> workspace)
{
    Bound::recompute_for_backward(pass::recomputation, parameters, state, x, y, workspace);
};
template <class Bound>
concept computes_statistics_alone = requires(parameters_view<float, Bound::parameter_count> parameters,
                                             state_view<pass::recomputation_t, float, Bound::state_count> state,
                                             batch_view<const float, typename Bound::input> x,
                                             std::span<float> workspace)
{
    Bound::forward_statistics(pass::recomputation, parameters, state, x, workspace);
};
// An empty workspace, as the contract's workspace_size states it for a
// batch of one (recompute_for_backward_of refuses a batch for which it is
// not empty).
template <class Bound>
constexpr bool has_empty_workspace()
{
    return Bound::workspace_size(1) == 0;
}

template <class Bound>
constexpr bool recomputation_writes_output()
{
    if constexpr (recomputes_for_backward<Bound>) {
        if constexpr (requires { requires std::same_as<decltype(Bound::recomputation_writes_output()), bool>; }) {
            return Bound::recomputation_writes_output();
        } else {
            return true;
        }
    } else {
        return !computes_statistics_alone<Bound> && !has_empty_workspace<Bound>();
    }
}

// Where recompute_for_backward_of finds Bound's workspace empty
// (has_empty_workspace) and leaves nothing: refuses a batch for which it is
// not empty after all, which backward would read unwritten.
template <class Bound>
void require_empty_workspace(std::size_t batch)
{
    if (Bound::workspace_size(batch) != 0) {
        raise_error(error_kind::logic_error,
                    "recompute_for_backward_of: a layer whose workspace is empty for a batch of one must keep it "
                    "empty for every batch");
    }
}

template <class Bound, class T>
void recompute_for_backward_of(pass::recomputation_t mode, parameters_view<T, Bound::parameter_count> parameters,
                               state_view<pass::recomputation_t, T, Bound::state_count> state,
                               const_batch<T, typename Bound::input> x, batch_view<T, typename Bound::output> y,
                               std::span<T> workspace)
{
    if constexpr (recomputes_for_backward<Bound>) {
        Bound::recompute_for_backward(mode, parameters, state, x, y, workspace);
    } else if constexpr (computes_statistics_alone<Bound>) {
        Bound::forward_statistics(mode, parameters, state, x, workspace);
    } else if constexpr (has_empty_workspace<Bound>()) {
        require_empty_workspace<Bound>(x.batch());
    } else {
        Bound::forward(mode, parameters, state, x, y, workspace);
    }
}

// A bound layer's or block's winograd_forward_flops, 0 where it states none.
template <class Bound>
constexpr std::size_t winograd_forward_flops_of()
{
    if constexpr (requires { Bound::winograd_forward_flops; }) {
        return Bound::winograd_forward_flops;
    } else {
        return 0;
    }
}

// He initialisation: the values drawn from a normal distribution of mean 0
// and variance 2 / fan_in, the scale that keeps activations of a ReLU network
// from growing or shrinking with depth. Drawn by petra's fill_normal
// (random.hpp) with deviation sqrt(2 / fan_in), so that a seed gives the same
// weights on every standard library.
template <class T>
void he_normal(std::span<T> values, std::size_t fan_in, std::mt19937_64& generator)
{
    fill_normal(values, 0.0, std::sqrt(2.0 / static_cast<double>(fan_in)), generator);
}

} // namespace petra
