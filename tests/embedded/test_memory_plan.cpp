// The compile-time memory plan of a pipeline (memory_plan.hpp) against what
// the pipeline allocates: every stage's buffers, the channels and the
// optimizers, to the byte, for J = 2, 3, 4 and each of the four buffer
// options; the kernel scratch of each stage's thread from the kernels' own
// demands; and a plan usable in a static_assert.
#include <algorithm>
#include <cstddef>

#include <doctest/doctest.h>

#include <petra/memory_plan.hpp>
#include <petra/petra.hpp>

#include "pipeline/pipeline_support.hpp"

using namespace petra;
using test::pipeline_network;

namespace {

constexpr pipeline_options buffer_options[] = {
    {.batch = 4},
    {.batch = 4, .input_buffer = true},
    {.batch = 4, .parameter_buffer = true},
    {.batch = 4, .input_buffer = true, .parameter_buffer = true},
};

// What pipeline_core::memory_bytes() counts: every buffer of the stages,
// workers and channels; not the parameters, the pipeline's weight mask, nor
// any kernel scratch.
template <std::size_t Stages>
std::size_t accounted_by_the_pipeline(const pipeline_memory_plan<Stages>& plan)
{
    std::size_t bytes = plan.shared_bytes - pipeline_network::parameter_count * sizeof(float);
    for (const stage_memory& stage : plan.stages) bytes += stage.total() - stage.parameters - stage.kernel_scratch;
    return bytes;
}

template <std::size_t J>
void check_plan_against_pipeline()
{
    constexpr auto cuts = test::cuts_of<J>;
    for (const pipeline_options& options : buffer_options) {
        CAPTURE(J);
        CAPTURE(options.input_buffer);
        CAPTURE(options.parameter_buffer);
        const auto plan = memory_plan<pipeline_network, cuts>(options);
        auto parameters = pipeline_network::make_parameters<float>(1);
        sequential_pipeline<pipeline_network, cuts, sgd<float>> pipeline(parameters, sgd_options{}, test::constant_rate,
                                                                         options);
        CHECK(accounted_by_the_pipeline(plan) == pipeline.memory_bytes());

        std::size_t parameters_planned = 0;
        for_each_index<J>([&](auto j) {
            using stage_type = stage<pipeline_network, cuts, j, float>;
            const stage_memory& planned = plan.stage(j);
            parameters_planned += planned.parameters;
            // SGD's velocity and its copy of the weight mask.
            CHECK(planned.optimizer_state == 2 * stage_type::parameter_count * sizeof(float));
            // The parameter buffer: a FIFO of 2 (J - 1 - j) + 1 copies.
            CHECK(
                planned.stashed_parameters ==
                (options.parameter_buffer ? stage_type::fifo_depth * stage_type::parameter_count * sizeof(float) : 0));
            // The last stage keeps one micro-batch's inputs among its working
            // buffers, no FIFO.
            if constexpr (stage_type::is_last) CHECK(planned.kept_inputs == 0);
            CHECK(planned.kernel_scratch == stage_type::kernel_scratch(options).thread_bytes());
            CHECK(plan.stage_bytes(j) == planned.total());
        });
        CHECK(parameters_planned ==
              (pipeline_network::parameter_count + pipeline_network::state_count) * sizeof(float));
    }
}

} // namespace

TEST_CASE("memory plan: every buffer the pipeline allocates, to the byte")
{
    check_plan_against_pipeline<2>();
    check_plan_against_pipeline<3>();
    check_plan_against_pipeline<4>();
}

TEST_CASE("memory plan: the buffers grow as the schedule says")
{
    constexpr auto cuts = test::cuts_of<3>;
    constexpr auto no_buffers = memory_plan<pipeline_network, cuts>({.batch = 4});
    constexpr auto inputs = memory_plan<pipeline_network, cuts>({.batch = 4, .input_buffer = true});
    constexpr auto stashing = memory_plan<pipeline_network, cuts>({.batch = 4, .parameter_buffer = true});
    // The input buffer keeps every block's input: more kept inputs in every
    // stage but the last, which keeps one micro-batch's anyway.
    for (std::size_t j = 0; j + 1 < 3; ++j) CHECK(inputs.stage(j).kept_inputs > no_buffers.stage(j).kept_inputs);
    // The parameter buffer adds its stashes and nothing else.
    for (std::size_t j = 0; j < 3; ++j) {
        CHECK(stashing.stage(j).stashed_parameters > 0);
        CHECK(stashing.stage_bytes(j) == no_buffers.stage_bytes(j) + stashing.stage(j).stashed_parameters);
    }
    // A rank hosting a group of stages holds their sum; replicas on ranks
    // add to each stage the D copies of its gradient sum it gathers, and
    // nothing else.
    CHECK(no_buffers.group_bytes(0, 3) + no_buffers.shared_bytes == no_buffers.total_bytes());
    CHECK(no_buffers.group_bytes(1, 3) == no_buffers.stage_bytes(1) + no_buffers.stage_bytes(2));
    constexpr auto replicas = memory_plan<pipeline_network, cuts>({.batch = 4, .replicas = 3});
    for_each_index<3>([&](auto j) {
        using stage_type = stage<pipeline_network, cuts, j, float>;
        CHECK(no_buffers.stage(j).replica_exchange == 0);
        CHECK(replicas.stage(j).replica_exchange ==
              3 * std::max(stage_type::parameter_count, stage_type::state_count) * sizeof(float));
        CHECK(replicas.stage_bytes(j) == no_buffers.stage_bytes(j) + replicas.stage(j).replica_exchange);
    });
    // Every activation-sized buffer grows with the micro-batch.
    constexpr auto larger = memory_plan<pipeline_network, cuts>({.batch = 8});
    CHECK(larger.total_bytes() > no_buffers.total_bytes());
    // A planner's check at compile time.
    static_assert(no_buffers.largest_stage_bytes() < 4 * 1024 * 1024, "the small network fits in 4 MiB per stage");
    static_assert(no_buffers.total_bytes() == no_buffers.shared_bytes + no_buffers.stage_bytes(0) +
                                                  no_buffers.stage_bytes(1) + no_buffers.stage_bytes(2));
}

TEST_CASE("memory plan: a stage's kernel scratch is what its kernels ask of the per-thread buffers")
{
    constexpr auto cuts = test::cuts_of<2>;
    using first = stage<pipeline_network, cuts, 0, float>;
    // The stem's convolution takes no input gradient in stage 0: its own
    // scratch is the larger request of a forward and a weight gradient.
    using stem = pipeline_network::block<0>;
    constexpr kernels::convolution_shape stem_convolution{4, 1, 6, 6, 8, 3, 1, 1};
    constexpr auto with_input_gradient = backward_scratch_of<stem, float>(4, true);
    constexpr auto without = backward_scratch_of<stem, float>(4, false);
    static_assert(with_input_gradient.thread_bytes() > without.thread_bytes());
    static_assert(without.thread_bytes() >=
                  kernels::convolution_backward_weights_scratch<float>(stem_convolution).thread_bytes());
    // The stage merges its blocks per buffer: never more than their sum.
    std::size_t sum = 0;
    pipeline_network::for_each_block([&](auto i) {
        if constexpr (i < cuts[1]) {
            using block = pipeline_network::block<i>;
            sum += forward_scratch_of<block, float>(4).thread_bytes() +
                   backward_scratch_of<block, float>(4, i != 0).thread_bytes();
        }
    });
    constexpr std::size_t planned = first::kernel_scratch({.batch = 4}).thread_bytes();
    CHECK(planned <= sum);
    CHECK(planned == memory_plan<pipeline_network, cuts>({.batch = 4}).stage(0).kernel_scratch);
}
