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
// Memory is allocated once, in the constructor: FIFOs hold `fifo_depth`
// micro-batches, enough for the 2 (J - 1 - Index) ticks a micro-batch spends
// between its forward and its backward in this stage, plus the one pushed by
// the forward of the tick that pops.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <petra/blocks/block.hpp>
#include <petra/kernels/simd.hpp>
#include <petra/network.hpp>
#include <petra/partition.hpp>
#include <petra/pipeline/array_fifo.hpp>
#include <petra/pipeline/options.hpp>
#include <petra/state_archive.hpp>

namespace petra {

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
    static constexpr std::size_t state_offset = Network::state_offsets[first_block];
    // Ticks between a micro-batch's forward and its backward here.
    static constexpr std::size_t delay = 2 * (stage_count - 1 - Index);
    static constexpr std::size_t fifo_depth = delay + 1;

    template <std::size_t I>
    using block = typename Network::template block<first_block + I>;

    stage(network_parameters<Network, T>& parameters, const pipeline_options& options)
        : batch_(options.batch), options_(options), parameters_(parameters.values().data() + parameter_offset),
          state_(parameters.state().data() + state_offset), gradient_(parameter_count, T(0))
    {
        if (options.batch == 0) throw std::invalid_argument("pipeline: the batch must hold at least one example.");
        std::size_t intermediate = 0, recomputed = 0, workspace = 0;
        for (std::size_t i = first_block; i < end_block; ++i) {
            const block_profile& profile = Network::profile[i];
            if (i + 1 < end_block) intermediate = std::max(intermediate, profile.output_values);
            workspace = std::max(workspace, Network::workspace_size(i, batch_));
            if (keeps_input(i)) {
                inputs_[i - first_block] = array_fifo<T>(fifo_depth, batch_ * profile.input_values);
                recomputed = std::max(recomputed, profile.output_values);
            }
        }
        // Between blocks: one buffer, or two alternating ones from three
        // blocks on, for the forward's activations (later the backward's
        // gradients) and one more set for the backward's rebuilt inputs.
        intermediate_size_ = batch_ * intermediate;
        const std::size_t alternating = std::min<std::size_t>(block_count - 1, 2);
        intermediates_.resize(2 * alternating * intermediate_size_);
        recomputed_.resize(batch_ * recomputed);
        workspace_.resize(workspace);
        // Stage 0 sends nothing down, but block 0 may still need somewhere to
        // write the input it rebuilds and its gradient.
        if constexpr (is_first) {
            const bool rebuilds = !keeps_input(first_block);
            const bool needs_gradient = !input_gradient_optional<block<0>>();
            sink_.resize(batch_ * input_values * (std::size_t(rebuilds) + std::size_t(needs_gradient)));
        }
        if (options.parameter_buffer) stashed_ = array_fifo<T>(fifo_depth, parameter_count);
    }

    std::size_t batch() const { return batch_; }
    std::span<T> parameters() { return {parameters_, parameter_count}; }
    std::span<const T> parameters() const { return {parameters_, parameter_count}; }
    // The sum of the parameter gradients of the micro-batches differentiated
    // since the last reset_gradient().
    std::span<T> gradient() { return gradient_; }
    void reset_gradient() { std::fill(gradient_.begin(), gradient_.end(), T(0)); }
    // Micro-batches forwarded and not yet differentiated.
    std::size_t in_flight() const { return in_flight_; }

    // x: batch * input_values values; y: batch * output_values.
    void forward(const T* x, T* y)
    {
        if (options_.parameter_buffer) std::copy(parameters_, parameters_ + parameter_count, stashed_.push());
        [&]<std::size_t... I>(std::index_sequence<I...>) {
            (forward_block<I>(x, y), ...);
        }(std::make_index_sequence<block_count>{});
        ++in_flight_;
    }

    // y: the stage's output for the oldest micro-batch in flight (as the
    // next stage rebuilt or kept it); grad_y its gradient. Writes the stage's
    // input to x and its gradient to grad_x (for stage 0, either may be null:
    // it has no one to send them to).
    void backward(const T* y, const T* grad_y, T* x, T* grad_x)
    {
        if (in_flight_ == 0) throw std::logic_error("pipeline stage: backward without a forward in flight.");
        if (!is_first && (x == nullptr || grad_x == nullptr)) {
            throw std::invalid_argument("pipeline stage: only stage 0 may leave its input and input gradient out.");
        }
        const T* parameters = options_.parameter_buffer ? stashed_.pop() : parameters_;
        const T* above = y;
        const T* grad_above = grad_y;
        [&]<std::size_t... R>(std::index_sequence<R...>) {
            (backward_block<block_count - 1 - R>(parameters, above, grad_above, x, grad_x), ...);
        }(std::make_index_sequence<block_count>{});
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
        // Every FIFO holds one array per micro-batch in flight.
        archive.count(in_flight_, fifo_depth);
        for (std::size_t i = first_block; i < end_block; ++i) {
            if (keeps_input(i)) inputs_[i - first_block].transfer_state(archive, in_flight_);
        }
        if (options_.parameter_buffer) stashed_.transfer_state(archive, in_flight_);
        archive.values(std::span<T>(gradient_));
    }

    std::size_t memory_bytes() const
    {
        std::size_t bytes = (intermediates_.size() + recomputed_.size() + sink_.size() + workspace_.size() +
                             gradient_.size()) *
                                sizeof(T) +
                            stashed_.memory_bytes();
        for (const auto& fifo : inputs_) bytes += fifo.memory_bytes();
        return bytes;
    }

private:
    bool keeps_input(std::size_t global_block) const
    {
        return options_.input_buffer || !Network::profile[global_block].reversible;
    }

    // Forward: block I reads the stage input or intermediate (I - 1) and
    // writes the stage output or intermediate I.
    template <std::size_t I>
    void forward_block(const T* x, T* y)
    {
        constexpr std::size_t g = first_block + I;
        const T* in = I == 0 ? x : activation(I - 1);
        T* out = I + 1 == block_count ? y : activation(I);
        if (keeps_input(g)) {
            const std::size_t count = batch_ * Network::profile[g].input_values;
            std::copy(in, in + count, inputs_[I].push());
        }
        block<I>::forward(pass::training, batch_, parameters_ + (Network::parameter_offsets[g] - parameter_offset),
                          state_ + (Network::state_offsets[g] - state_offset), in, out, workspace_.data());
    }

    // Backward: block I's output (and its gradient) is `above`; its input
    // (and gradient) goes to intermediate I - 1 of the backward's buffers (or
    // to x and grad_x for block 0), and becomes `above` for block I - 1.
    template <std::size_t I>
    void backward_block(const T* parameters, const T*& above, const T*& grad_above, T* x, T* grad_x)
    {
        constexpr std::size_t g = first_block + I;
        const std::size_t in_count = batch_ * Network::profile[g].input_values;
        const T* block_parameters = parameters + (Network::parameter_offsets[g] - parameter_offset);
        T* block_state = state_ + (Network::state_offsets[g] - state_offset);
        T* block_gradient = gradient_.data() + (Network::parameter_offsets[g] - parameter_offset);
        // The network's input is data: its gradient is skipped where the
        // first block allows it.
        T* grad_in;
        if constexpr (g == 0 && input_gradient_optional<block<I>>()) {
            grad_in = nullptr;
        } else if constexpr (I == 0) {
            grad_in = grad_x != nullptr ? grad_x : sink_.data() + sink_.size() - batch_ * input_values;
        } else {
            grad_in = gradient(I - 1);
        }
        const T* in = nullptr; // set below: every block either kept its input or is reversible
        if (keeps_input(g)) {
            T* kept = inputs_[I].pop();
            recompute_backward<block<I>>(batch_, block_parameters, block_state, static_cast<const T*>(kept),
                                         grad_above, grad_in, block_gradient, workspace_.data(),
                                         recomputed_.data());
            if (I == 0 && x != nullptr) std::copy(kept, kept + in_count, x);
            in = kept;
        } else {
            if constexpr (block<I>::reversible) {
                T* rebuilt = I > 0 ? rebuilt_input(I - 1) : x != nullptr ? x : sink_.data();
                reconstruct_backward<block<I>>(batch_, block_parameters, block_state, above, grad_above, rebuilt,
                                               grad_in, block_gradient, workspace_.data());
                in = rebuilt;
            }
        }
        above = in;
        grad_above = grad_in;
    }

    // Intermediate k sits between blocks k and k + 1, in buffer k % 2 of a
    // set: the forward's activations, the backward's gradients (the same set:
    // forward is over when backward runs), the backward's rebuilt inputs.
    T* activation(std::size_t k) { return intermediates_.data() + (k % 2) * intermediate_size_; }
    T* gradient(std::size_t k) { return activation(k); }
    T* rebuilt_input(std::size_t k)
    {
        return intermediates_.data() + intermediates_.size() / 2 + (k % 2) * intermediate_size_;
    }

    std::size_t batch_;
    pipeline_options options_;
    T* parameters_;
    T* state_;
    kernels::aligned_vector<T> gradient_;
    std::array<array_fifo<T>, block_count> inputs_{};
    array_fifo<T> stashed_;
    kernels::aligned_vector<T> intermediates_;
    kernels::aligned_vector<T> recomputed_;
    kernels::aligned_vector<T> sink_;
    kernels::aligned_vector<T> workspace_;
    std::size_t intermediate_size_ = 0;
    std::size_t in_flight_ = 0;
};

} // namespace petra
