// The job's gradient-fidelity probe on the pipeline tests' small network,
// with threads (ctest label pipeline: also run under ThreadSanitizer, which
// checks the probe's trace capture on the stages' threads): at a learning
// rate of zero the parameters never move, so every stage's gradient is the
// true one and the probe must read cosine 1 and norm ratio 1; at a real
// rate the stalest stage reads less than 1.
#include <cstddef>
#include <vector>

#include <doctest/doctest.h>

#include <petra/petra.hpp>

#include "fidelity.hpp"
#include "pipeline/pipeline_support.hpp"

using namespace petra;
using test::cuts_of;
using test::pipeline_network;
using test::plain_sgd;

namespace {

// Trains two epochs of 12 micro-batches, measuring every third tick that
// can be measured; returns every measurement.
std::vector<fashion::stage_fidelity> measure(double learning_rate, std::size_t accumulation)
{
    constexpr std::size_t J = 3;
    constexpr auto cuts = cuts_of<J>;
    const test::micro_batches data(12, 4, 17);
    auto parameters = pipeline_network::make_parameters<float>(2);
    thread_pipeline<pipeline_network, cuts, sgd<float>> pipeline(parameters, plain_sgd,
                                                                 [learning_rate](std::size_t) { return learning_rate; },
                                                                 {.batch = 4, .accumulation = accumulation});
    fashion::fidelity_probe<pipeline_network, cuts> probe(4);
    pipeline.set_trace([&probe](const pipeline_event<float>& event) { probe.observe(event); });
    std::vector<fashion::stage_fidelity> all;
    for (std::size_t epoch = 0; epoch < 2; ++epoch) {
        for (std::size_t m = 0; m < data.images.size(); ++m) {
            probe.remember(m, data.images[m].data(), data.labels[m].data());
            const bool measured = probe.measurable() && m % 3 == 0;
            if (measured) probe.before_tick(pipeline.pause(), m);
            pipeline.feed(data.images[m], data.labels[m]);
            if (measured) {
                const auto paused = pipeline.pause();
                for (const auto& result : probe.after_tick()) {
                    CHECK(result.micro_batch == m - 2 * (J - 1) + result.stage);
                    all.push_back(result);
                }
            }
        }
        pipeline.drain();
    }
    return all;
}

} // namespace

TEST_CASE("fidelity probe: cosine 1 and norm ratio 1 on every stage when the parameters do not move" *
          doctest::timeout(300))
{
    for (std::size_t accumulation : {1, 3}) {
        CAPTURE(accumulation);
        const auto results = measure(0.0, accumulation);
        // Ticks 6 and 9 of each epoch, 3 stages each.
        REQUIRE(results.size() == 2 * 2 * 3);
        for (const auto& result : results) {
            CAPTURE(result.stage);
            CAPTURE(result.micro_batch);
            CHECK(result.cosine > 0.99999);
            CHECK(result.norm_ratio == doctest::Approx(1.0).epsilon(1e-4));
        }
    }
}

TEST_CASE("fidelity probe: at a real learning rate the stalest stage's gradient is not the true one" *
          doctest::timeout(300))
{
    const auto results = measure(0.2, 1);
    double lowest_first_stage = 1;
    for (const auto& result : results) {
        CHECK(result.cosine > -1.0);
        CHECK(result.cosine <= 1.0 + 1e-9);
        if (result.stage == 0) lowest_first_stage = std::min(lowest_first_stage, result.cosine);
    }
    CHECK(lowest_first_stage < 0.9999);
}
