// No heap allocation per tick on MPI ranks once running, as in the thread
// pipeline (tests/pipeline/test_pipeline_allocations.cpp): every buffer and
// every message slot is allocated at construction, and the receives are
// posted into them. This executable replaces malloc with a counting one and
// counts this rank's allocations, MPI's own included, during two epochs
// (24 micro-batches, over 24 ticks), after a first one has let per-thread
// scratch and MPI's internal lists grow. MPI's library now and then still
// takes one block in such a stretch (measured: 0 in most runs, 1 in some,
// depending on when messages arrive), so the check allows 2: an allocation
// per tick anywhere would make at least 24.
#include <atomic>
#include <cstddef>
#include <cstdlib>

#include <doctest/doctest.h>
#include <mpi.h>

#include <petra/mpi.hpp>
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

template <std::size_t J>
void check_second_epoch_allocates_nothing(const pipeline_options& options)
{
    int ranks = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    if (std::size_t(ranks) > J) return;
    CAPTURE(J);
    CAPTURE(options.parameter_buffer);
    const test::micro_batches data(12, 4, 1);
    mpi_pipeline<pipeline_network, test::cuts_of<J>, sgd<float>> pipeline(MPI_COMM_WORLD, 1, sgd_options{},
                                                                          test::constant_rate, options);
    run_epoch(pipeline, data);
    const std::size_t before = test::allocations.load();
    run_epoch(pipeline, data);
    run_epoch(pipeline, data);
    CHECK(test::allocations.load() - before <= 2);
}

} // namespace

TEST_CASE("mpi pipeline: no heap allocation per tick once running")
{
    for (const pipeline_options& options :
         {pipeline_options{.batch = 4},
          pipeline_options{.batch = 4, .accumulation = 2, .input_buffer = true, .parameter_buffer = true}}) {
        check_second_epoch_allocates_nothing<2>(options);
        check_second_epoch_allocates_nothing<3>(options);
    }
    // The counter sees allocations.
    const std::size_t before = test::allocations.load();
    // (Kept in a volatile pointer: a compiler may drop a new-expression whose
    // result is deleted unused, as clang++ does.)
    std::size_t* volatile boxed = new std::size_t(1);
    CHECK(test::allocations.load() >= before + 1);
    delete boxed;
}
