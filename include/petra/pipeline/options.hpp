// What a pipeline's user chooses (floor 7): the micro-batch size, the
// accumulation factor, the two buffers that turn PETRA into its
// delayed-gradient relatives, and how much a stage's learning rate shrinks
// with the delay of its gradients. Both drivers, each stage and each stage's
// worker take the same options. The stage refuses a batch of 0, the worker
// an accumulation of 0 and a delay_rate_exponent that is negative or not
// finite, and replicas of 0 (std::invalid_argument); the stage also refuses
// a precision this CPU cannot compute in.
#pragma once

#include <cmath>
#include <cstddef>

#include <petra/layers/precision.hpp>

namespace petra {

struct pipeline_options {
    std::size_t batch = 64;        // examples per micro-batch
    std::size_t accumulation = 1;  // micro-batches per optimizer step (k)
    bool input_buffer = false;     // every block keeps its input (no reconstruction)
    bool parameter_buffer = false; // weight stashing: backward uses the forward's parameters
    // p in stage j's learning rate, rate(step) / (1 + tau_j)^p, tau_j its
    // gradients' delay in optimizer steps (delay_in_steps). 0 (the
    // default): every stage takes the schedule's rate as it is; larger p
    // slows the stalest stages more. Finite and 0 or more. Not saved in a
    // checkpoint: like the rate schedule, the caller's to repeat.
    double delay_rate_exponent = 0;
    // D copies of the pipeline, each training on its own shard of every
    // global micro-batch of D x batch examples, their gradients summed
    // before each step (pipeline/replicas.hpp): the simulator and MPI ranks
    // run them; a thread_pipeline runs one (1, the default).
    std::size_t replicas = 1;
    // What the stages' training steps compute their products in
    // (layers/precision.hpp): fp32 (the default) or bf16, with float
    // parameters, gradients and optimizer either way; inference is in fp32.
    // A stage refuses bf16 on a CPU without its instructions
    // (require_precision). Not saved in a checkpoint: a run may resume in
    // the other precision.
    petra::precision precision = petra::precision::fp32;
};

// Stage j of J's gradients are 2 (J - 1 - j) micro-batches old when it
// applies them: delay_ticks / k optimizer steps.
constexpr double delay_in_steps(std::size_t delay_ticks, std::size_t accumulation)
{
    return double(delay_ticks) / double(accumulation);
}

// The factor on a stage's learning rate, 1 / (1 + tau)^p: exactly
// 1 for p = 0 or a stage without delay (the last).
inline double delay_rate_scale(const pipeline_options& options, std::size_t delay_ticks)
{
    if (options.delay_rate_exponent == 0 || delay_ticks == 0) return 1;
    return std::pow(1 + delay_in_steps(delay_ticks, options.accumulation), -options.delay_rate_exponent);
}

} // namespace petra
