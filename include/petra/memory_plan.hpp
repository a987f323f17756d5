// The memory of a pipeline as a compile-time fact, for planners (above the
// pipeline and the optimizer, floors 7 and 8): memory_plan<Network, Cuts>
// gives, for a micro-batch size and the buffer options, what every stage
// of a thread_pipeline holds once running, in bytes, from the same sizes
// the stages, workers and channels allocate:
//
//   constexpr auto cuts = partition<net, 4>();
//   constexpr auto plan = memory_plan<net, cuts>({.batch = 64});
//   static_assert(plan.stage_bytes(0) < 96 * 1024 * 1024, "stage 0 must fit its node");
//
// Per stage:
// - parameters: its slice of the trained values and running statistics
//   (they live once, in the caller's network_parameters);
// - optimizer_state: what its optimizer keeps (SGD: the velocity and its
//   copy of the weight mask), from Optimizer::state_bytes(parameter_count);
// - kept_inputs: the FIFOs of the blocks that keep their input (not
//   reversible, or every block with the input buffer): depth 2 (J - 1 - j)
//   + 1 micro-batch inputs each (none in the last stage, which keeps one
//   micro-batch's inputs among its working buffers);
// - stashed_parameters: with the parameter buffer, a FIFO of as many copies
//   of its parameters;
// - working_buffers: the activations between its blocks, their workspaces,
//   the rebuilt inputs, the gradient sum, the last stage's logits and the
//   channels into the stage;
// - kernel_scratch: the per-thread buffers its kernels grow on the stage's
//   thread (kernels/scratch.hpp), the largest request of each;
// - replica_exchange: with options.replicas = D > 1 on MPI ranks, the D
//   copies of its gradient sum (or of its running statistics, whichever is
//   larger) it gathers before each step (mpi/replicas.hpp).
// shared_bytes: the pipeline's weight mask and its labels channel.
//
// On MPI ranks, R per replica, every replica's rank r hosts the same group
// of stages, [groups[r], groups[r + 1]) with groups =
// stage_groups<Network, Cuts>(R): group_bytes(groups[r], groups[r + 1]) is
// what that rank's stages hold, whatever D.
//
// Not counted: the program and its libraries, the caller's data, each
// thread's stack, the allocator's own overhead and what the feeding thread
// allocates. A sequential_pipeline runs every stage on one thread: its
// kernel scratch is per buffer the largest over the stages, not their sum.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <utility>

#include <petra/kernels/scratch.hpp>
#include <petra/network.hpp>
#include <petra/optim/sgd.hpp>
#include <petra/pipeline/core.hpp>
#include <petra/pipeline/options.hpp>
#include <petra/pipeline/stage.hpp>
#include <petra/pipeline/worker.hpp>

namespace petra {

// What one stage holds, in bytes (see the top of the file).
struct stage_memory {
    std::size_t parameters = 0;
    std::size_t optimizer_state = 0;
    std::size_t kept_inputs = 0;
    std::size_t stashed_parameters = 0;
    std::size_t working_buffers = 0;
    std::size_t kernel_scratch = 0;
    std::size_t replica_exchange = 0;

    constexpr std::size_t total() const
    {
        return parameters + optimizer_state + kept_inputs + stashed_parameters + working_buffers + kernel_scratch +
               replica_exchange;
    }
};

template <std::size_t Stages>
struct pipeline_memory_plan {
    std::array<stage_memory, Stages> stages{};
    std::size_t shared_bytes = 0;

    static constexpr std::size_t stage_count = Stages;
    constexpr const stage_memory& stage(std::size_t j) const { return stages[j]; }
    // Everything stage j holds (what its node or core must hold).
    constexpr std::size_t stage_bytes(std::size_t j) const { return stages[j].total(); }
    constexpr std::size_t largest_stage_bytes() const
    {
        std::size_t largest = 0;
        for (const stage_memory& stage : stages) largest = std::max(largest, stage.total());
        return largest;
    }
    // What a rank hosting stages [first, end) holds for them.
    constexpr std::size_t group_bytes(std::size_t first, std::size_t end) const
    {
        std::size_t bytes = 0;
        for (std::size_t j = first; j < end; ++j) bytes += stages[j].total();
        return bytes;
    }
    // The whole pipeline (one replica): every stage and what they share.
    constexpr std::size_t total_bytes() const
    {
        std::size_t total = shared_bytes;
        for (const stage_memory& stage : stages) total += stage.total();
        return total;
    }
};

namespace detail {

template <class Optimizer>
struct optimizer_states_its_bytes {
    static constexpr bool value = requires { Optimizer::state_bytes(std::size_t{1}); };
    static_assert(value, "memory_plan needs the optimizer's state size: a static constexpr "
                         "state_bytes(parameter_count), as sgd has.");
};

template <class Network, auto Cuts, class Optimizer, class T, std::size_t J>
constexpr stage_memory stage_memory_of(const pipeline_options& options)
{
    using stage_type = stage<Network, Cuts, J, T>;
    using core = pipeline_core<Network, Cuts, Optimizer, T>;
    constexpr std::size_t value = sizeof(T);
    const stage_buffers buffers = stage_type::buffers(options);
    stage_memory memory;
    memory.parameters = (stage_type::parameter_count + stage_type::state_count) * value;
    memory.optimizer_state = Optimizer::state_bytes(stage_type::parameter_count);
    memory.kept_inputs = buffers.kept_inputs * value;
    memory.stashed_parameters = buffers.stashed_parameters * value;
    // The worker's logits and their gradient, and the channels into the stage.
    memory.working_buffers = (buffers.total() - buffers.kept_inputs - buffers.stashed_parameters) * value +
                             2 * stage_worker<stage_type, Optimizer, T>::logits_values(options) * value +
                             core::forward_channel_bytes(J, options.batch);
    if constexpr (!stage_type::is_last) memory.working_buffers += core::backward_channel_bytes(J, options.batch);
    memory.kernel_scratch = stage_type::kernel_scratch(options).thread_bytes();
    if (options.replicas > 1) {
        memory.replica_exchange =
            options.replicas * std::max(stage_type::parameter_count, stage_type::state_count) * value;
    }
    return memory;
}

} // namespace detail

// The memory of a pipeline of Network cut at Cuts, with Optimizer and values
// of T, for options (micro-batch size, input and parameter buffers): see the
// top of the file.
template <class Network, auto Cuts, class Optimizer = sgd<float>, class T = float>
constexpr pipeline_memory_plan<Cuts.size() - 1> memory_plan(const pipeline_options& options)
{
    static_assert(detail::optimizer_states_its_bytes<Optimizer>::value);
    constexpr std::size_t stage_count = Cuts.size() - 1;
    using core = pipeline_core<Network, Cuts, Optimizer, T>;
    pipeline_memory_plan<stage_count> plan;
    ([&]<std::size_t... J>(std::index_sequence<J...>) {
        ((plan.stages[J] = detail::stage_memory_of<Network, Cuts, Optimizer, T, J>(options)), ...);
    })(std::make_index_sequence<stage_count>{});
    plan.shared_bytes = Network::parameter_count * sizeof(T) + core::labels_channel_bytes(options.batch);
    return plan;
}

} // namespace petra
