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

extern "C" {
void* __libc_malloc(std::size_t size);
void* __libc_calloc(std::size_t count, std::size_t size);
void* __libc_realloc(void* memory, std::size_t size);
void* __libc_memalign(std::size_t alignment, std::size_t size);
}

namespace {
std::atomic<std::size_t> allocations{0};
}

extern "C" void* malloc(std::size_t size)
{
    allocations.fetch_add(1, std::memory_order_relaxed);
    return __libc_malloc(size);
}
extern "C" void* calloc(std::size_t count, std::size_t size)
{
    allocations.fetch_add(1, std::memory_order_relaxed);
    return __libc_calloc(count, size);
}
extern "C" void* realloc(void* memory, std::size_t size)
{
    allocations.fetch_add(1, std::memory_order_relaxed);
    return __libc_realloc(memory, size);
}
extern "C" int posix_memalign(void** memory, std::size_t alignment, std::size_t size)
{
    allocations.fetch_add(1, std::memory_order_relaxed);
    *memory = __libc_memalign(alignment, size);
    return *memory == nullptr && size != 0 ? 12 /* ENOMEM */ : 0;
}
extern "C" void* aligned_alloc(std::size_t alignment, std::size_t size)
{
    allocations.fetch_add(1, std::memory_order_relaxed);
    return __libc_memalign(alignment, size);
}

using namespace petra;
using test::pipeline_network;

namespace {

template <class Pipeline>
void run_epoch(Pipeline& pipeline, const test::micro_batches& data)
{
    for (std::size_t m = 0; m < data.images.size(); ++m) pipeline.feed(data.images[m].data(), data.labels[m].data());
    pipeline.drain();
}

template <class Pipeline>
std::size_t allocations_in_second_epoch(Pipeline& pipeline, const test::micro_batches& data)
{
    run_epoch(pipeline, data);
    const std::size_t before = allocations.load();
    run_epoch(pipeline, data);
    return allocations.load() - before;
}

constexpr auto cuts = partition<pipeline_network, 3>();
constexpr pipeline_options stashing{.batch = 4, .accumulation = 2, .input_buffer = true, .parameter_buffer = true};

} // namespace

TEST_CASE("pipeline: no heap allocation per tick once running")
{
    const test::micro_batches data(12, 4, 1);
    for (const pipeline_options& options : {pipeline_options{.batch = 4}, stashing}) {
        auto parameters = pipeline_network::make_parameters<float>(1);
        {
            sequential_pipeline<pipeline_network, cuts, sgd<float>> pipeline(parameters, sgd_options{},
                                                                             test::constant_rate, options);
            CHECK(allocations_in_second_epoch(pipeline, data) == 0);
        }
        {
            thread_pipeline<pipeline_network, cuts, sgd<float>> pipeline(parameters, sgd_options{},
                                                                         test::constant_rate, options);
            CHECK(allocations_in_second_epoch(pipeline, data) == 0);
        }
    }
    // The counter sees both kinds of allocation: aligned buffers and new.
    const std::size_t before = allocations.load();
    auto parameters = pipeline_network::make_parameters<float>(1);
    CHECK(allocations.load() >= before + 2);
    // (Kept in a volatile pointer: a compiler may drop a new-expression whose
    // result is deleted unused, as clang++ does.)
    std::size_t* volatile boxed = new std::size_t(1);
    CHECK(allocations.load() >= before + 3);
    delete boxed;
}
