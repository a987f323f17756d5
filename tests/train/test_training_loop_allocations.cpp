// No heap allocation per micro-batch in the training loop: once a first
// epoch has let every buffer grow to its size, a whole second epoch (the
// data source's micro-batches, the method's training, the statistics, the
// epoch's end and its record) allocates nothing, with every method of one
// process. This executable replaces malloc with a counting one
// (counting_malloc.hpp); not built with sanitizers, which replace it too.
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include <doctest/doctest.h>

#include <petra/petra.hpp>

#include "pipeline/pipeline_support.hpp"

#include "counting_malloc.hpp"

namespace {

using net = petra::test::pipeline_network;

// Allocations during the second of two epochs of Method.
template <class Method>
std::size_t allocations_in_second_epoch()
{
    std::vector<float> images(48 * net::input::size);
    std::vector<std::int32_t> labels(48);
    std::mt19937_64 generator(3);
    petra::fill_normal(std::span<float>(images), 0.0, 1.0, generator);
    for (std::size_t n = 0; n < labels.size(); ++n) labels[n] = std::int32_t(n % 3);
    petra::tensor_source<net::input> source(images, labels, 4, /*seed=*/9);
    const petra::training_plan plan({.epochs = 2, .batches_per_epoch = 12, .accumulation = 2}, {.peak = 0.02});
    auto weights = net::make_parameters<float>(1);
    Method method(weights, petra::sgd_options{}, plan.schedule(), {.batch = 4, .accumulation = 2});
    std::size_t after_first = 0, after_second = 0;
    petra::training_callbacks callbacks;
    callbacks.epoch_finished = [&](const petra::epoch_record& record) {
        (record.epoch == 1 ? after_first : after_second) = petra::test::allocations.load();
    };
    petra::training_loop loop(method, source, plan, {}, callbacks);
    REQUIRE(loop.run());
    return after_second - after_first;
}

} // namespace

TEST_CASE("training loop: no heap allocation per micro-batch once running, with every method of one process")
{
    CHECK(allocations_in_second_epoch<petra::exact_backprop_method<net>>() == 0);
    CHECK(allocations_in_second_epoch<petra::reversible_backprop_method<net>>() == 0);
    CHECK(allocations_in_second_epoch<petra::petra_on_simulator<net, petra::test::cuts_of<3>>>() == 0);
    CHECK(allocations_in_second_epoch<petra::petra_on_threads<net, petra::test::cuts_of<3>>>() == 0);
}
