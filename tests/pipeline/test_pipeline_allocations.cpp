// No heap allocation per tick in the steady state: every buffer of a
// pipeline is sized at construction from the compile-time shapes and the
// batch. This executable replaces malloc (which operator new and the aligned
// allocators of petra's buffers both call) with a counting one, and counts
// the allocations of every thread during a second epoch, after a first one
// has let per-thread scratch grow to its final size. Not built with
// sanitizers, which replace malloc themselves.
#include <atomic>
#include <cstddef>
#include <cstdlib>

#include <doctest/doctest.h>

#include <petra/petra.hpp>

#include "pipeline/pipeline_support.hpp"

#include "counting_malloc.hpp"

using namespace petra;
using test::pipeline_network;

namespace {

template <class Pipeline>
void run_epoch(Pipeline& pipeline, const test::micro_batches& data)
{
    for (std::size_t m = 0; m < data.images.size(); ++m) pipeline.feed(data.images[m], data.labels[m]);
    pipeline.drain();
}

template <class Pipeline>
std::size_t allocations_in_second_epoch(Pipeline& pipeline, const test::micro_batches& data)
{
    run_epoch(pipeline, data);
    const std::size_t before = test::allocations.load();
    run_epoch(pipeline, data);
    return test::allocations.load() - before;
}

constexpr pipeline_options stashing{.batch = 4, .accumulation = 2, .input_buffer = true, .parameter_buffer = true};

} // namespace

TEST_CASE("pipeline: no heap allocation per tick once running")
{
    const test::micro_batches data(12, 4, 1);
    for (const pipeline_options& options : {pipeline_options{.batch = 4}, stashing}) {
        auto parameters = pipeline_network::make_parameters<float>(1);
        {
            test::simulator<3> pipeline(parameters, sgd_options{}, test::constant_rate, options);
            CHECK(allocations_in_second_epoch(pipeline, data) == 0);
        }
        {
            test::threads<3> pipeline(parameters, sgd_options{}, test::constant_rate, options);
            CHECK(allocations_in_second_epoch(pipeline, data) == 0);
        }
    }
    // The counter sees both kinds of allocation: aligned buffers and new.
    const std::size_t before = test::allocations.load();
    auto parameters = pipeline_network::make_parameters<float>(1);
    CHECK(test::allocations.load() >= before + 2);
    // (Kept in a volatile pointer: a compiler may drop a new-expression whose
    // result is deleted unused, as clang++ does.)
    std::size_t* volatile boxed = new std::size_t(1);
    CHECK(test::allocations.load() >= before + 3);
    delete boxed;
}
