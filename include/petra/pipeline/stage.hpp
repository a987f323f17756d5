// One stage of a pipeline (floor 7): the blocks [Cuts[Index], Cuts[Index+1])
// of a network, their slice of the parameters, and the computations of one
// tick. It knows nothing of threads or channels: the worker (worker.hpp)
// moves messages and keeps the schedule; a benchmark can drive a stage alone.
//
// forward(x, y): the blocks in order, with batch statistics (running
// statistics updated). A block whose input must be kept (a block that is not
// reversible, or any block with the input buffer on) pushes its input onto
// its FIFO; with the parameter buffer on, the stage's parameters are pushed
// onto a FIFO of copies (weight stashing).
//
// backward(y, grad_y, x, grad_x): for the OLDEST micro-batch forwarded and
// not yet differentiated. The blocks in reverse order: a block that kept its
// input pops it and recomputes from it (recompute_backward); a reversible
// block rebuilds its input from its output (reconstruct_backward), with the
// parameters current now (PETRA) or those stashed at the forward. Writes the
// stage's input as rebuilt (or popped) to x and its gradient to grad_x, and
// adds the parameter gradient to the stage's gradient sum.
//
// The last stage differentiates each micro-batch in the tick that forwards
// it, with the same parameters: nothing is stale there, so it keeps what
// its backward needs (every block's input and workspace, as exact backprop
// does) and neither reconstructs nor recomputes. With one stage, PETRA is
// then exact backprop.
//
// Memory is allocated once, in the constructor: FIFOs hold `fifo_depth`
// micro-batches, enough for the 2 (J - 1 - Index) ticks a micro-batch spends
// between its forward and its backward in this stage, plus the one pushed by
// the forward of the tick that pops.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include <petra/batch_view.hpp>
#include <petra/blocks/block.hpp>
#include <petra/boundary_layout.hpp>
#include <petra/error.hpp>
#include <petra/kernels/scratch.hpp>
#include <petra/kernels/simd.hpp>
#include <petra/network.hpp>
#include <petra/partition.hpp>
#include <petra/pipeline/array_fifo.hpp>
#include <petra/pipeline/options.hpp>
#include <petra/state_archive.hpp>
#include <petra/type_list.hpp>

namespace petra {

// stage::backward's default block_done: nothing to do as a block's
// gradient is final.
struct ignore_block_gradient {
    template <class Values>
    constexpr void operator()(const Values&) const noexcept
    {}
};

// The buffers of a stage, in values (stage::buffers).
struct stage_buffers {
    std::size_t gradient = 0;           // the sum of the parameter gradients
    std::size_t kept_inputs = 0;        // the FIFOs of the inputs kept, all entries
    std::size_t stashed_parameters = 0; // the parameter buffer's FIFO, all entries
    std::size_t intermediate = 0;       // one set of the activations between blocks (of a micro-batch)
    std::size_t intermediates = 0;      // the activations between blocks, forward and rebuilt
    std::size_t recomputed = 0;         // a recomputed output (not the last stage; where a block may write one)
    std::size_t last_stage_inputs = 0;  // the last stage's block inputs of one micro-batch
    std::size_t workspace = 0;          // the blocks' workspace (each its own in the last stage)
    std::size_t sink = 0;               // stage 0's rebuilt input and input gradient

    // Every value allocated (intermediate is one of the intermediates).
    constexpr std::size_t total() const
    {
        return gradient + kept_inputs + stashed_parameters + intermediates + recomputed + last_stage_inputs +
               workspace + sink;
    }
};

template <class Network, auto Cuts, std::size_t Index, class T>
class stage {
    static constexpr std::size_t stage_count_value = Cuts.size() - 1;
    static_assert(valid_cuts<Network>(Cuts),
                  "The cuts must run from 0 to the network's block count, every stage holding at least one block.");
    static_assert(Index < stage_count_value, "This stage index is not one of the pipeline's stages.");

public:
    static constexpr std::size_t stage_count = stage_count_value;
    static constexpr std::size_t index = Index;
    static constexpr std::size_t first_block = Cuts[Index];
    static constexpr std::size_t end_block = Cuts[Index + 1];
    static constexpr std::size_t block_count = end_block - first_block;
    static constexpr bool is_first = Index == 0;
    static constexpr bool is_last = Index + 1 == stage_count;
    static constexpr std::size_t input_values = Network::profile[first_block].input_values;
    static constexpr std::size_t output_values = Network::profile[end_block - 1].output_values;
    static constexpr std::size_t parameter_offset = Network::parameter_offsets[first_block];
    static constexpr std::size_t parameter_count = Network::parameter_offsets[end_block] - parameter_offset;
    // FLOPs of one tick per example, counted at compile time: forward,
    // reconstruction (or recomputation) and backward of the stage's blocks;
    // the last stage reconstructs nothing.
    static constexpr std::size_t tick_flops = [] {
        std::size_t flops = 0;
        for (std::size_t i = first_block; i < end_block; ++i) {
            const block_profile& profile = Network::profile[i];
            flops += is_last ? profile.forward_flops + profile.backward_flops : profile.tick_flops();
        }
        return flops;
    }();
    static constexpr std::size_t state_offset = Network::state_offsets[first_block];
    static constexpr std::size_t state_count = Network::state_offsets[end_block] - state_offset;
    // Ticks between a micro-batch's forward and its backward here.
    static constexpr std::size_t delay = 2 * (stage_count - 1 - Index);
    static constexpr std::size_t fifo_depth = delay + 1;

    template <std::size_t I>
    using block = typename Network::template block<first_block + I>;
    // The shapes the stage takes and gives.
    using input = typename block<0>::input;
    using output = typename block<block_count - 1>::output;

    // What the stage allocates for options, in values of T (memory_plan
    // counts the same): its constructor sizes every buffer from this.
    static constexpr stage_buffers buffers(const pipeline_options& options)
    {
        const std::size_t batch = options.batch;
        stage_buffers sizes;
        std::size_t recomputed = 0;
        for (std::size_t i = first_block; i < end_block; ++i) {
            const block_profile& profile = Network::profile[i];
            sizes.workspace = is_last ? sizes.workspace + Network::workspace_size(i, batch)
                                      : std::max(sizes.workspace, Network::workspace_size(i, batch));
            if (keeps_input(options, i)) {
                if (!is_last) sizes.kept_inputs += fifo_depth * batch * profile.input_values;
                if (profile.recomputation_writes_output) recomputed = std::max(recomputed, profile.output_values);
            }
        }
        // The last stage keeps every block's input of one micro-batch.
        if (is_last) sizes.last_stage_inputs = batch * kept_layout.size;
        // Between blocks: one set of buffers for the forward's activations
        // (intermediate_layout; later the backward's gradients,
        // intermediate_gradient_layout) and, except in the last stage, one
        // more for the backward's rebuilt inputs.
        // (The last stage's forward writes into its kept inputs: only its
        // gradients come here.)
        sizes.intermediate = batch * (is_last ? intermediate_gradient_layout.size
                                              : std::max(intermediate_layout.size, intermediate_gradient_layout.size));
        sizes.intermediates = (is_last ? 1 : 2) * sizes.intermediate;
        if (!is_last) sizes.recomputed = batch * recomputed;
        // Stage 0 sends nothing down, but block 0 may still need somewhere to
        // write the input it rebuilds and its gradient.
        if (is_first) {
            const bool rebuilds = !keeps_input(options, first_block);
            const bool needs_gradient = !input_gradient_optional<block<0>>();
            sizes.sink = batch * input_values * (std::size_t(rebuilds) + std::size_t(needs_gradient));
        }
        sizes.gradient = parameter_count;
        if (options.parameter_buffer) sizes.stashed_parameters = fifo_depth * parameter_count;
        return sizes;
    }

    // What the stage's kernels ask of per-thread scratch (kernels/scratch.hpp)
    // over a tick: every block's forward (a training or recomputation pass)
    // and backward, block 0 of stage 0 without the input gradient where it
    // may skip it.
    static constexpr kernels::scratch_demand kernel_scratch(const pipeline_options& options)
    {
        kernels::scratch_demand demand;
        for_each_index<block_count>([&](auto i) {
            using bound = block<i>;
            const bool input_gradient = !(is_first && i == 0 && input_gradient_optional<bound>());
            demand.merge(forward_scratch_of<bound, T>(options.batch, options.precision));
            demand.merge(backward_scratch_of<bound, T>(options.batch, input_gradient, options.precision));
        });
        return demand;
    }

    // The stage's slice of a whole network's parameters.
    stage(network_parameters_view<Network, T> parameters, const pipeline_options& options)
        : stage(parameters.values().template subspan<parameter_offset, parameter_count>(),
                parameters.state().template subspan<state_offset, state_count>(), options)
    {}

    // The stage's parameters and running statistics held elsewhere (a
    // parameter_slice of its blocks, when the rest of the network lives in
    // other processes), laid out as in the network from first_block on.
    stage(std::span<T, parameter_count> parameters, std::span<T, state_count> state, const pipeline_options& options)
        : batch_(options.batch), options_(options), parameters_(parameters), state_(state)
    {
        if (options.batch == 0) {
            raise_error(error_kind::invalid_argument, "pipeline: the batch must hold at least one example.");
        }
        require_precision(options.precision);
        const stage_buffers sizes = buffers(options);
        for (std::size_t i = first_block; i < end_block; ++i) {
            if (keeps_input(i)) {
                // The last stage keeps its inputs elsewhere: an empty FIFO
                // that still states its entry size, so that checkpoints keep
                // one layout.
                inputs_[i - first_block] =
                    array_fifo<T>(is_last ? 0 : fifo_depth, batch_ * Network::profile[i].input_values);
            }
        }
        gradient_.resize(sizes.gradient);
        intermediate_size_ = sizes.intermediate;
        intermediates_.resize(sizes.intermediates);
        recomputed_.resize(sizes.recomputed);
        kept_.resize(sizes.last_stage_inputs);
        workspace_.resize(sizes.workspace);
        sink_.resize(sizes.sink);
        if (options.parameter_buffer) stashed_ = array_fifo<T>(fifo_depth, parameter_count);
    }

    std::size_t batch() const { return batch_; }
    std::span<T, parameter_count> parameters() { return parameters_; }
    std::span<const T, parameter_count> parameters() const { return parameters_; }
    // The sum of the parameter gradients of the micro-batches differentiated
    // since the last reset_gradient().
    std::span<T, parameter_count> gradient()
    {
        return std::span<T, parameter_count>(gradient_.data(), parameter_count);
    }
    void reset_gradient() { std::fill(gradient_.begin(), gradient_.end(), T(0)); }
    // Micro-batches forwarded and not yet differentiated.
    std::size_t in_flight() const { return in_flight_; }

    // x: a micro-batch of options.batch examples; y: the stage's output.
    void forward(const_batch<T, input> x, batch_view<T, output> y)
    {
        check_batch(x.batch(), "forward");
        if (is_last && in_flight_ > 0) {
            raise_error(error_kind::logic_error,
                        "pipeline stage: the last stage differentiates a micro-batch before it forwards "
                        "the next.");
        }
        if (options_.parameter_buffer) std::copy_n(parameters_.data(), parameter_count, stashed_.push());
        const precision_scope arithmetic(options_.precision);
        for_each_index<block_count>([&](auto i) { forward_block<i>(x, y); });
        ++in_flight_;
    }

    // Inference (evaluation): the blocks in order with their running
    // statistics, nothing updated, nothing kept; a batch of any size; in
    // fp32 whatever options.precision, as predict.
    // Scratch is per thread (it grows once to its largest use), so that a
    // forward-only pass leaves the stage's training buffers alone.
    void infer(const_batch<T, input> x, batch_view<T, output> y) const
    {
        const std::size_t batch = x.batch();
        if (y.batch() != batch) {
            raise_error(error_kind::invalid_argument, "pipeline stage: inference of " + std::to_string(batch) +
                                                          " examples into " + std::to_string(y.batch()) + " outputs.");
        }
        if (batch == 0) return;
        const precision_scope in_fp32(precision::fp32);
        struct inference_scratch;
        std::size_t activation = 0, workspace = 0;
        for (std::size_t i = first_block; i < end_block; ++i) {
            activation = std::max(activation, batch * Network::profile[i].output_values);
            workspace = std::max(workspace, Network::workspace_size(i, batch));
        }
        T* scratch = kernels::thread_scratch<inference_scratch, T>(2 * activation + workspace);
        const std::span<T> work(scratch + 2 * activation, workspace);
        // Block I reads buffer (I - 1) % 2 and writes buffer I % 2.
        for_each_index<block_count>([&](auto index) {
            constexpr std::size_t i = decltype(index)::value;
            using bound = block<i>;
            const auto in = [&] {
                if constexpr (i == 0) return x;
                else return batch_view<const T, typename bound::input>(scratch + ((i - 1) % 2) * activation, batch);
            }();
            const auto out = [&] {
                if constexpr (i + 1 == block_count) return y;
                else return batch_view<T, typename bound::output>(scratch + (i % 2) * activation, batch);
            }();
            bound::forward(
                pass::inference, block_parameters<i>(parameters_),
                Network::template state_of<first_block + i, first_block>(std::span<const T, state_count>(state_)), in,
                out, work);
        });
    }

    // y: the stage's output for the oldest micro-batch in flight (as the
    // next stage rebuilt or kept it); grad_y its gradient. Writes the stage's
    // input to x and its gradient to grad_x (for stage 0, either may be an
    // empty view: it has no one to send them to). As each block's backward
    // ends, last block first, block_done(that block's slice of gradient())
    // is called: the rest of this backward does not change that slice (a
    // driver may start sending it while the blocks below compute).
    template <class BlockDone = ignore_block_gradient>
    void backward(const_batch<T, output> y, const_batch<T, output> grad_y, batch_view<T, input> x,
                  batch_view<T, input> grad_x, BlockDone&& block_done = {})
    {
        if (in_flight_ == 0) {
            raise_error(error_kind::logic_error, "pipeline stage: backward without a forward in flight.");
        }
        if (!is_first && (!x || !grad_x)) {
            raise_error(error_kind::invalid_argument,
                        "pipeline stage: only stage 0 may leave its input and input gradient out.");
        }
        check_batch(y.batch(), "backward");
        const std::span<const T, parameter_count> parameters =
            options_.parameter_buffer ? std::span<const T, parameter_count>(stashed_.pop(), parameter_count)
                                      : std::span<const T, parameter_count>(parameters_);
        // Block I's output and its gradient, for I from the last block down:
        // each block leaves there its own input and input gradient.
        const T* above = y.data();
        const T* grad_above = grad_y.data();
        const precision_scope arithmetic(options_.precision);
        for_each_index_down<block_count>([&](auto i) {
            backward_block<i>(parameters, above, grad_above, x, grad_x);
            block_done(std::span<const T>(block_gradient<i>()));
        });
        --in_flight_;
    }

    // What lives from one tick to the next: the kept inputs and stashed
    // parameters in flight, the gradient sum, the in-flight count. (The
    // parameters themselves belong to the caller's network_parameters.)
    template <state_archive Archive>
    void transfer_state(Archive& archive)
    {
        archive.section("stage");
        archive.expect(Index, "stage index");
        archive.expect(first_block, "first block of the stage");
        archive.expect(end_block, "end block of the stage");
        archive.expect(batch_, "micro-batch size");
        archive.expect(options_.input_buffer ? 1 : 0, "input buffer");
        archive.expect(options_.parameter_buffer ? 1 : 0, "parameter buffer");
        // Every FIFO holds one array per micro-batch in flight; the last
        // stage differentiates what it forwards in the same tick, so between
        // ticks it has none (its input FIFOs have no room for one).
        archive.count(in_flight_, is_last ? 0 : fifo_depth);
        for (std::size_t i = first_block; i < end_block; ++i) {
            if (keeps_input(i)) inputs_[i - first_block].transfer_state(archive, in_flight_);
        }
        if (options_.parameter_buffer) stashed_.transfer_state(archive, in_flight_);
        archive.values(std::span<T>(gradient_));
    }

    std::size_t memory_bytes() const
    {
        std::size_t bytes = (intermediates_.size() + recomputed_.size() + kept_.size() + sink_.size() +
                             workspace_.size() + gradient_.size()) *
                                sizeof(T) +
                            stashed_.memory_bytes();
        for (const auto& fifo : inputs_) bytes += fifo.memory_bytes();
        return bytes;
    }

private:
    // Where the activations between the stage's blocks sit, per example
    // (boundary_layout.hpp): boundary K is block K's output, K < block_count
    // - 1; a block that passes its input's first half through (an additive
    // coupling) finds it in place, in the forward, the inverse and the
    // backward (its gradients laid out with later boundaries above: the
    // input gradient's second half is the output gradient's first), except
    // where its input or output is the stage's own (a channel's buffer) or
    // where a run of such blocks starts a new chain (boundary_layout.hpp).
    static constexpr auto intermediate_layout =
        detail::lay_out_block_boundaries<Network, first_block + 1, block_count - 1>(
            detail::half_order::later_below, detail::boundary_placement::neighbours_apart);
    static constexpr auto intermediate_gradient_layout =
        detail::lay_out_block_boundaries<Network, first_block + 1, block_count - 1>(
            detail::half_order::later_above, detail::boundary_placement::neighbours_apart);
    // The last stage's kept inputs, boundary I being block I's input, every
    // one kept.
    static constexpr auto kept_layout = detail::lay_out_block_boundaries<Network, first_block, block_count>(
        detail::half_order::later_below, detail::boundary_placement::every_boundary_kept);

    static constexpr bool keeps_input(const pipeline_options& options, std::size_t global_block)
    {
        return options.input_buffer || !Network::profile[global_block].reversible;
    }
    bool keeps_input(std::size_t global_block) const { return keeps_input(options_, global_block); }

    void check_batch(std::size_t batch, const char* what) const
    {
        if (batch != batch_) {
            raise_error(error_kind::invalid_argument, "pipeline stage: " + std::string(what) + " of a batch of " +
                                                          std::to_string(batch) + " examples; this stage takes " +
                                                          std::to_string(batch_) + ".");
        }
    }

    // Block I's parameters, state and gradient, cut from the stage's arrays.
    template <std::size_t I>
    static auto block_parameters(std::span<const T, parameter_count> parameters)
    {
        return Network::template parameters_of<first_block + I, first_block>(parameters);
    }
    template <std::size_t I>
    auto block_state() const
    {
        return Network::template state_of<first_block + I, first_block>(std::span<const T, state_count>(state_));
    }
    template <std::size_t I>
    auto block_gradient()
    {
        return Network::template parameters_of<first_block + I, first_block>(gradient());
    }

    // Last stage: block I's kept input, at kept_layout.offset[I] (per
    // example), and block I's own workspace; other stages share one
    // workspace.
    template <std::size_t I>
    batch_view<T, typename block<I>::input> kept_input()
    {
        return {kept_.data() + kept_layout.offset[I] * batch_, batch_};
    }
    template <std::size_t I>
    std::span<T> block_workspace()
    {
        if constexpr (is_last) {
            std::size_t offset = 0;
            for (std::size_t k = 0; k < I; ++k) offset += Network::workspace_size(first_block + k, batch_);
            return {workspace_.data() + offset, Network::workspace_size(first_block + I, batch_)};
        } else {
            return std::span<T>(workspace_);
        }
    }

    // The activation between blocks K and K + 1 (forward), in the first
    // set at intermediate_layout's offset; the backward writes the gradient
    // of that activation there too (forward is over when backward runs), at
    // intermediate_gradient_layout's, and the rebuilt activation in the
    // second set at the forward's offset (an inverse's x lies a half above
    // its y, as a forward's input lies a half above its output).
    template <std::size_t K>
    batch_view<T, typename block<K>::output> activation()
    {
        return {intermediates_.data() + intermediate_layout.offset[K] * batch_, batch_};
    }
    template <std::size_t K>
    batch_view<T, typename block<K>::output> activation_gradient()
    {
        return {intermediates_.data() + intermediate_gradient_layout.offset[K] * batch_, batch_};
    }
    template <std::size_t K>
    batch_view<T, typename block<K>::output> rebuilt_activation()
    {
        return {intermediates_.data() + intermediate_size_ + intermediate_layout.offset[K] * batch_, batch_};
    }

    // Forward: block I reads the stage input or activation I - 1 and writes
    // the stage output or activation I. A block that keeps its input pushes
    // it first. In the last stage every block's input and workspace are
    // kept: activation I is block I + 1's kept input.
    template <std::size_t I>
    void forward_block(const_batch<T, input> x, batch_view<T, output> y)
    {
        using bound = block<I>;
        if constexpr (is_last && I == 0) copy_batch(x, kept_input<0>());
        const auto in = [&] {
            if constexpr (is_last) return batch_view<const T, typename bound::input>(kept_input<I>());
            else if constexpr (I == 0) return x;
            else return batch_view<const T, typename bound::input>(activation<I - 1>());
        }();
        const auto out = [&] {
            if constexpr (I + 1 == block_count) return y;
            else if constexpr (is_last) return kept_input<I + 1>();
            else return activation<I>();
        }();
        if (!is_last && keeps_input(first_block + I)) {
            copy_batch(in, batch_view<T, typename bound::input>(inputs_[I].push(), batch_));
        }
        bound::forward(pass::training, block_parameters<I>(parameters_),
                       Network::template state_of<first_block + I, first_block>(state_), in, out, block_workspace<I>());
    }

    // Backward of block I from its output `above` and that output's
    // gradient; its input and input gradient go to the stage's x and grad_x
    // (block 0) or to the rebuilt activation and activation gradient I - 1,
    // which become `above` for block I - 1.
    template <std::size_t I>
    void backward_block(std::span<const T, parameter_count> parameters, const T*& above, const T*& grad_above,
                        batch_view<T, input> x, batch_view<T, input> grad_x)
    {
        using bound = block<I>;
        constexpr std::size_t g = first_block + I;
        using in_view = batch_view<T, typename bound::input>;
        const batch_view<const T, typename bound::output> y(above, batch_), grad_y(grad_above, batch_);
        // The network's input is data: its gradient is skipped where the
        // first block allows it.
        const in_view block_grad_x = [&] {
            if constexpr (g == 0 && input_gradient_optional<bound>()) return in_view{};
            else if constexpr (I == 0)
                return grad_x ? grad_x : in_view(sink_.data() + sink_.size() - batch_ * input_values, batch_);
            else return activation_gradient<I - 1>();
        }();
        in_view in;
        if constexpr (is_last) {
            in = kept_input<I>();
            bound::backward(block_parameters<I>(parameters), in, grad_y, block_grad_x, block_gradient<I>(),
                            block_workspace<I>());
            if constexpr (I == 0) {
                if (x) copy_batch<T>(in, x);
            }
        } else if (keeps_input(g)) {
            in = in_view(inputs_[I].pop(), batch_);
            recompute_backward<bound>(block_parameters<I>(parameters), block_state<I>(), in, grad_y, block_grad_x,
                                      block_gradient<I>(), block_workspace<I>(),
                                      batch_view<T, typename bound::output>(recomputed_.data(), batch_));
            if constexpr (I == 0) {
                if (x) copy_batch<T>(in, x);
            }
        } else if constexpr (bound::reversible) {
            in = [&] {
                if constexpr (I > 0) return rebuilt_activation<I - 1>();
                else return x ? x : in_view(sink_.data(), batch_);
            }();
            reconstruct_backward<bound>(block_parameters<I>(parameters), block_state<I>(), y, grad_y, in, block_grad_x,
                                        block_gradient<I>(), block_workspace<I>());
        }
        above = in.data();
        grad_above = block_grad_x.data();
    }

    std::size_t batch_;
    pipeline_options options_;
    std::span<T, parameter_count> parameters_;
    std::span<T, state_count> state_;
    kernels::aligned_vector<T> gradient_;
    std::array<array_fifo<T>, block_count> inputs_{};
    array_fifo<T> stashed_;
    kernels::aligned_vector<T> intermediates_;
    kernels::aligned_vector<T> recomputed_;
    kernels::aligned_vector<T> kept_; // the last stage's block inputs
    kernels::aligned_vector<T> sink_;
    kernels::aligned_vector<T> workspace_;
    std::size_t intermediate_size_ = 0;
    std::size_t in_flight_ = 0;
};

} // namespace petra
