// Reading a running pipeline through pause()'s guard: after every feed, the
// threads' guard gives the parameters, running statistics and gradient sums
// the simulator's gives at the same point, bit for bit; feed() and drain()
// under a guard are refused with a plain message and change nothing; a guard
// releases on scope exit (also a moved one, and nested ones when the last
// goes); a checkpoint can be saved under a guard. Under ThreadSanitizer
// (label pipeline) the first case also shows that reading through the guard
// while the stages' threads wait is race-free.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <petra/petra.hpp>

#include "pipeline/pipeline_support.hpp"
#include "support.hpp"

using namespace petra;
using test::cuts_of;
using test::feed_range;
using test::pipeline_network;
using test::plain_sgd;
using test::simulator;
using test::threads;

namespace {

constexpr const char* feed_refused =
    "pipeline: feed() while the pipeline is paused; let the paused_pipeline that pause() returned go out of scope "
    "first.";
constexpr const char* drain_refused =
    "pipeline: drain() while the pipeline is paused; let the paused_pipeline that pause() returned go out of scope "
    "first.";

bool same(std::span<const float> a, std::span<const float> b) { return std::ranges::equal(a, b); }

template <std::size_t J>
void check_guards_agree(std::size_t accumulation)
{
    CAPTURE(J);
    CAPTURE(accumulation);
    const test::micro_batches data(11, 4, 5 + J);
    const pipeline_options options{.batch = 4, .accumulation = accumulation};
    auto threaded = pipeline_network::make_parameters<float>(3);
    auto simulated = threaded;
    threads<J> running(threaded, plain_sgd, test::constant_rate, options);
    simulator<J> stepping(simulated, plain_sgd, test::constant_rate, options);
    bool some_sum_nonzero = false;
    for (std::size_t epoch = 0; epoch < 2; ++epoch) {
        for (std::size_t m = 0; m < data.images.size(); ++m) {
            CAPTURE(epoch);
            CAPTURE(m);
            running.feed(data.images[m], data.labels[m]);
            stepping.feed(data.images[m], data.labels[m]);
            const auto thread_view = running.pause();
            const auto simulator_view = stepping.pause();
            // The guard reads the network_parameters the pipeline trains.
            CHECK(thread_view.parameters().data() == threaded.values().data());
            CHECK(thread_view.parameters().size() == pipeline_network::parameter_count);
            CHECK(thread_view.state().size() == pipeline_network::state_count);
            CHECK(same(thread_view.parameters(), simulator_view.parameters()));
            CHECK(same(thread_view.state(), simulator_view.state()));
            for (std::size_t j = 0; j < J; ++j) {
                CAPTURE(j);
                CHECK(thread_view.gradient_sum(j).size() == pipeline_network::parameter_offsets[cuts_of<J>[j + 1]] -
                                                                pipeline_network::parameter_offsets[cuts_of<J>[j]]);
                CHECK(same(thread_view.gradient_sum(j), simulator_view.gradient_sum(j)));
                some_sum_nonzero = some_sum_nonzero ||
                                   std::ranges::any_of(thread_view.gradient_sum(j), [](float g) { return g != 0.0f; });
            }
            CHECK(running.progress().loss_sum == stepping.progress().loss_sum);
        }
        CHECK(running.drain().correct == stepping.drain().correct);
    }
    // The guard saw a pipeline at work: parameters moved, gradients pending.
    const auto initial = pipeline_network::make_parameters<float>(3);
    CHECK(!std::ranges::equal(initial.values(), threaded.values()));
    if (accumulation > 1) CHECK(some_sum_nonzero);
}

// Under a guard, feed() and drain() are refused and feed nothing: once the
// guard is gone, the run ends as one that was never refused.
template <class Pipeline>
void check_refusal_changes_nothing()
{
    const test::micro_batches data(9, 4, 31);
    auto reference = pipeline_network::make_parameters<float>(4);
    auto refused = reference;
    epoch_statistics reference_epoch, refused_epoch;
    {
        Pipeline pipeline(reference, plain_sgd, test::constant_rate, {.batch = 4, .accumulation = 2});
        feed_range(pipeline, data, 0, data.images.size());
        reference_epoch = pipeline.drain();
    }
    {
        Pipeline pipeline(refused, plain_sgd, test::constant_rate, {.batch = 4, .accumulation = 2});
        feed_range(pipeline, data, 0, 5);
        {
            const auto paused = pipeline.pause();
            CHECK_THROWS_WITH_AS(pipeline.feed(data.images[5], data.labels[5]), feed_refused, std::logic_error);
            CHECK_THROWS_WITH_AS(pipeline.drain(), drain_refused, std::logic_error);
        }
        feed_range(pipeline, data, 5, data.images.size());
        refused_epoch = pipeline.drain();
    }
    CHECK(std::ranges::equal(reference.values(), refused.values()));
    CHECK(std::ranges::equal(reference.state(), refused.state()));
    CHECK(refused_epoch.micro_batches == data.images.size());
    CHECK(refused_epoch.loss_sum == reference_epoch.loss_sum);
}

// A guard held in an optional (moved in), a nested one, and a checkpoint
// saved under a guard; the pipeline is held until the last guard goes.
template <class Pipeline>
void check_release()
{
    const test::micro_batches data(6, 4, 32);
    auto parameters = pipeline_network::make_parameters<float>(5);
    Pipeline pipeline(parameters, plain_sgd, test::constant_rate, {.batch = 4});
    {
        const auto before_any_feed = pipeline.pause();
        CHECK(std::ranges::equal(before_any_feed.parameters(), parameters.values()));
        CHECK_THROWS_AS((void)before_any_feed.gradient_sum(Pipeline::stage_count), std::out_of_range);
    }
    feed_range(pipeline, data, 0, 2);
    std::optional<typename Pipeline::paused> held;
    held.emplace(pipeline.pause());
    {
        const auto nested = pipeline.pause();
        const std::string path = test::temporary_path("paused.checkpoint");
        checkpoint_writer out(path, pipeline_network::signature);
        pipeline.transfer_state(out); // pauses too, under the caller's guards
        out.commit();
        std::remove(path.c_str());
    }
    // One guard is gone, the moved-in one lives on.
    CHECK_THROWS_WITH_AS(pipeline.feed(data.images[2], data.labels[2]), feed_refused, std::logic_error);
    held.reset();
    feed_range(pipeline, data, 2, data.images.size());
    CHECK(pipeline.drain().micro_batches == data.images.size());
}

} // namespace

TEST_CASE("pipeline pause: after every feed the threads' guard reads what the simulator's reads" *
          doctest::timeout(300))
{
    check_guards_agree<2>(1);
    check_guards_agree<3>(2);
    check_guards_agree<4>(1);
    check_guards_agree<4>(2);
}

TEST_CASE("pipeline pause: feed and drain under a guard are refused and feed nothing" * doctest::timeout(120))
{
    check_refusal_changes_nothing<simulator<3>>();
    check_refusal_changes_nothing<threads<3>>();
}

TEST_CASE("pipeline pause: pause() reports a stage's failure instead of reading a broken pipeline" *
          doctest::timeout(60))
{
    test::micro_batches data(6, 4, 33);
    data.images[2].data()[0] = std::nanf("");
    auto parameters = pipeline_network::make_parameters<float>(1);
    simulator<2> stepping(parameters, plain_sgd, test::constant_rate, {.batch = 4});
    CHECK_THROWS_AS(feed_range(stepping, data, 0, data.images.size()), std::runtime_error);
    CHECK_THROWS_WITH_AS((void)stepping.pause(), doctest::Contains("is not finite"), std::runtime_error);
    threads<2> running(parameters, plain_sgd, test::constant_rate, {.batch = 4});
    feed_range(running, data, 0, 4); // the last stage meets micro-batch 2 at tick 3
    CHECK_THROWS_WITH_AS((void)running.pause(), doctest::Contains("is not finite"), std::runtime_error);
}

TEST_CASE("pipeline pause: a guard releases on scope exit; nested and moved guards hold until the last goes" *
          doctest::timeout(120))
{
    check_release<simulator<2>>();
    check_release<threads<2>>();
}
