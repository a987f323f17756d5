// PETRA's pipeline: one stage is reversible backprop; threads compute what
// the sequential simulator computes, bit for bit, for J = 2, 3, 4, k = 1, 2
// and every buffer configuration; the schedule's staleness, fill and drain;
// with both buffers on, the gradients of delayed backprop with stashed
// weights; a delay rate exponent scales each stage's rate as documented; a
// failing stage stops the whole pipeline; the same in bf16 where the CPU
// computes in it (refused where not).
#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include <petra/petra.hpp>

#include "layers/workspace_scaling.hpp"
#include "pipeline/pipeline_support.hpp"
#include "support.hpp"

using namespace petra;
using test::cuts_of;
using test::pipeline_network;
using test::plain_sgd;

namespace {

template <std::size_t J>
void check_threads_equal_simulation(std::size_t accumulation, bool input_buffer, bool parameter_buffer,
                                    double delay_rate_exponent = 0, precision arithmetic = precision::fp32)
{
    CAPTURE(J);
    CAPTURE(accumulation);
    CAPTURE(input_buffer);
    CAPTURE(parameter_buffer);
    CAPTURE(delay_rate_exponent);
    CAPTURE(precision_name(arithmetic));
    const test::micro_batches data(27, 4, 100 + J);
    const pipeline_options options{.batch = 4,
                                   .accumulation = accumulation,
                                   .input_buffer = input_buffer,
                                   .parameter_buffer = parameter_buffer,
                                   .delay_rate_exponent = delay_rate_exponent,
                                   .precision = arithmetic};
    auto simulated = pipeline_network::make_parameters<float>(3);
    auto threaded = simulated;
    std::vector<epoch_statistics> simulated_epochs, threaded_epochs;
    {
        sequential_pipeline<pipeline_network, cuts_of<J>, sgd<float>> pipeline(simulated, plain_sgd,
                                                                               test::constant_rate, options);
        simulated_epochs = test::train_epochs(pipeline, data, 2);
    }
    {
        thread_pipeline<pipeline_network, cuts_of<J>, sgd<float>> pipeline(threaded, plain_sgd, test::constant_rate,
                                                                           options);
        threaded_epochs = test::train_epochs(pipeline, data, 2);
    }
    // 2 epochs of 27 micro-batches: more than 50 ticks per stage.
    CHECK(std::equal(simulated.values().begin(), simulated.values().end(), threaded.values().begin()));
    CHECK(std::equal(simulated.state().begin(), simulated.state().end(), threaded.state().begin()));
    for (std::size_t e = 0; e < 2; ++e) {
        CHECK(simulated_epochs[e].micro_batches == 27);
        CHECK(threaded_epochs[e].loss_sum == simulated_epochs[e].loss_sum);
        CHECK(threaded_epochs[e].correct == simulated_epochs[e].correct);
    }
    // The parameters moved.
    const auto initial = pipeline_network::make_parameters<float>(3);
    CHECK(!std::equal(initial.values().begin(), initial.values().end(), threaded.values().begin()));
}

// Every event of a run, in order per stage.
struct recorder {
    std::mutex mutex;
    std::vector<pipeline_event<float>> events;
    std::map<std::pair<std::size_t, std::size_t>, std::vector<float>> forward_parameters; // (stage, micro-batch)
    std::map<std::pair<std::size_t, std::size_t>, std::vector<float>> step_gradients;     // (stage, micro-batch)

    void operator()(const pipeline_event<float>& event)
    {
        std::lock_guard lock(mutex);
        events.push_back(event);
        events.back().parameters = {};
        events.back().gradient = {};
        if (event.what == pipeline_event<float>::kind::forward) {
            forward_parameters[{event.stage, event.micro_batch}].assign(event.parameters.begin(),
                                                                        event.parameters.end());
        } else if (event.what == pipeline_event<float>::kind::step) {
            step_gradients[{event.stage, event.micro_batch}].assign(event.gradient.begin(), event.gradient.end());
        }
    }
};

} // namespace

// The last stage differentiates each micro-batch in the tick that forwards
// it, from what it kept: one stage is exact backprop, to the bit.
TEST_CASE("pipeline: one stage is exact backprop with SGD, bit for bit")
{
    const test::micro_batches data(12, 4, 1);
    auto pipelined = pipeline_network::make_parameters<float>(5);
    auto reference = pipelined;
    {
        sequential_pipeline<pipeline_network, cuts_of<1>, sgd<float>> pipeline(pipelined, plain_sgd,
                                                                               test::constant_rate, {.batch = 4});
        test::train_epochs(pipeline, data, 1);
    }
    const auto mask = pipeline_network::weight_mask<float>();
    sgd<float> optimizer(plain_sgd, mask);
    exact_backprop<pipeline_network, float> trainer(4);
    std::vector<float> gradient(pipeline_network::parameter_count);
    for (std::size_t m = 0; m < data.images.size(); ++m) {
        std::fill(gradient.begin(), gradient.end(), 0.0f);
        trainer.accumulate_gradient(reference, 4, data.images[m].data(), data.labels[m].data(), gradient);
        optimizer.step(reference.values(), gradient, 1, test::constant_rate(m));
    }
    CHECK(std::equal(pipelined.values().begin(), pipelined.values().end(), reference.values().begin()));
    CHECK(std::equal(pipelined.state().begin(), pipelined.state().end(), reference.state().begin()));
}

// bf16 is a stage's setting for every driver: threads equal the simulator,
// one stage is exact backprop run under a bf16 scope, bit for bit, and the
// numbers are not fp32's. Refused, naming the instruction, on a CPU without
// a bf16 engine (AMX or AVX512-BF16).
TEST_CASE("pipeline: in bf16, threads equal the simulator and one stage is exact backprop in bf16, bit for bit")
{
    auto parameters = pipeline_network::make_parameters<float>(5);
    const pipeline_options options{.batch = 4, .precision = precision::bf16};
    if (!kernels::bf16_support().amx && !kernels::bf16_support().avx512_bf16) {
        CHECK_THROWS_AS((sequential_pipeline<pipeline_network, cuts_of<1>, sgd<float>>(parameters, plain_sgd,
                                                                                       test::constant_rate, options)),
                        std::invalid_argument);
        CHECK_THROWS_AS((exact_backprop_method<pipeline_network>(parameters, plain_sgd, {.peak = 0.02}, options)),
                        std::invalid_argument);
        return;
    }
    check_threads_equal_simulation<2>(1, false, false, 0, precision::bf16);
    check_threads_equal_simulation<4>(2, false, false, 0, precision::bf16);

    const test::micro_batches data(12, 4, 1);
    auto in_fp32 = parameters;
    auto reference = parameters;
    {
        sequential_pipeline<pipeline_network, cuts_of<1>, sgd<float>> pipeline(parameters, plain_sgd,
                                                                               test::constant_rate, options);
        test::train_epochs(pipeline, data, 1);
        sequential_pipeline<pipeline_network, cuts_of<1>, sgd<float>> fp32_pipeline(in_fp32, plain_sgd,
                                                                                    test::constant_rate, {.batch = 4});
        test::train_epochs(fp32_pipeline, data, 1);
    }
    sgd<float> optimizer(plain_sgd, pipeline_network::weight_mask<float>());
    exact_backprop<pipeline_network, float> trainer(4);
    std::vector<float> gradient(pipeline_network::parameter_count);
    for (std::size_t m = 0; m < data.images.size(); ++m) {
        std::fill(gradient.begin(), gradient.end(), 0.0f);
        const precision_scope in_bf16(precision::bf16);
        trainer.accumulate_gradient(reference, 4, data.images[m].data(), data.labels[m].data(), gradient);
        optimizer.step(reference.values(), gradient, 1, test::constant_rate(m));
    }
    CHECK(std::equal(parameters.values().begin(), parameters.values().end(), reference.values().begin()));
    CHECK(std::equal(parameters.state().begin(), parameters.state().end(), reference.state().begin()));
    CHECK(!std::equal(parameters.values().begin(), parameters.values().end(), in_fp32.values().begin()));
    CHECK(thread_precision() == precision::fp32);
}

TEST_CASE("pipeline: threads and the sequential simulator end with bit-identical parameters")
{
    for (std::size_t accumulation : {1, 2}) {
        for (bool input_buffer : {false, true}) {
            for (bool parameter_buffer : {false, true}) {
                check_threads_equal_simulation<2>(accumulation, input_buffer, parameter_buffer);
                check_threads_equal_simulation<3>(accumulation, input_buffer, parameter_buffer);
                check_threads_equal_simulation<4>(accumulation, input_buffer, parameter_buffer);
            }
        }
        check_threads_equal_simulation<3>(accumulation, false, false, 0.5);
    }
}

// With delay_rate_exponent p, stage j of J steps at rate / (1 + tau_j)^p,
// tau_j = 2 (J - 1 - j) / k optimizer steps. Plain SGD (no momentum, no
// decay) moves the parameters by exactly rate * factor * the gradients'
// average: the factor is read back from each stage's first step.
TEST_CASE("pipeline: a delay rate exponent scales each stage's learning rate by 1 / (1 + its delay in steps)^p")
{
    constexpr std::size_t J = 3;
    constexpr sgd_options no_momentum{.momentum = 0, .nesterov = false, .weight_decay = 0};
    constexpr double rate = 0.02;
    for (std::size_t accumulation : {1, 2}) {
        for (double exponent : {0.0, 0.5, 1.0}) {
            CAPTURE(accumulation);
            CAPTURE(exponent);
            const test::micro_batches data(9, 4, 31);
            auto parameters = pipeline_network::make_parameters<float>(6);
            // Per stage: the parameters before each step, and each step's gradient sum and count.
            std::map<std::size_t, std::vector<std::vector<float>>> before, sums;
            std::map<std::size_t, std::vector<std::size_t>> counts;
            sequential_pipeline<pipeline_network, cuts_of<J>, sgd<float>> pipeline(
                parameters, no_momentum, [](std::size_t) { return rate; },
                {.batch = 4, .accumulation = accumulation, .delay_rate_exponent = exponent});
            pipeline.set_trace([&](const pipeline_event<float>& event) {
                if (event.what != pipeline_event<float>::kind::step) return;
                before[event.stage].emplace_back(event.parameters.begin(), event.parameters.end());
                sums[event.stage].emplace_back(event.gradient.begin(), event.gradient.end());
                counts[event.stage].push_back(event.gradients);
            });
            test::train_epochs(pipeline, data, 1);
            for (std::size_t j = 0; j < J; ++j) {
                CAPTURE(j);
                REQUIRE(before[j].size() >= 2);
                const double tau = 2.0 * double(J - 1 - j) / double(accumulation);
                const double expected = 1 / std::pow(1 + tau, exponent);
                // Least squares: before - after = rate * factor * sum / count.
                double moved_dot_gradient = 0, gradient_squared = 0;
                for (std::size_t i = 0; i < before[j][0].size(); ++i) {
                    const double average = double(sums[j][0][i]) / double(counts[j][0]);
                    moved_dot_gradient += (double(before[j][0][i]) - double(before[j][1][i])) * average;
                    gradient_squared += average * average;
                }
                REQUIRE(gradient_squared > 0);
                CHECK(moved_dot_gradient / (rate * gradient_squared) == doctest::Approx(expected).epsilon(1e-3));
            }
        }
    }
}

TEST_CASE("pipeline: stage j differentiates at tick t the micro-batch t - 2(J - 1) + j, forwarded 2(J - 1 - j) "
          "ticks before")
{
    constexpr std::size_t J = 4;
    const test::micro_batches data(9, 4, 7);
    auto parameters = pipeline_network::make_parameters<float>(1);
    recorder trace;
    thread_pipeline<pipeline_network, cuts_of<J>, sgd<float>> pipeline(parameters, plain_sgd, test::constant_rate,
                                                                       {.batch = 4});
    pipeline.set_trace(std::ref(trace));
    test::train_epochs(pipeline, data, 1);
    std::size_t backwards = 0;
    for (const auto& event : trace.events) {
        CAPTURE(event.stage);
        CAPTURE(event.tick);
        if (event.what == pipeline_event<float>::kind::forward) {
            CHECK(event.micro_batch == event.tick - event.stage);
        } else if (event.what == pipeline_event<float>::kind::backward) {
            ++backwards;
            CHECK(event.micro_batch + 2 * (J - 1) == event.tick + event.stage);
            // The micro-batch this stage forwards in the same tick is
            // 2 (J - 1 - j) later: that is the gradient's staleness.
            const std::size_t forwarded_now = event.tick - event.stage;
            CHECK(forwarded_now - event.micro_batch == 2 * (J - 1 - event.stage));
        } else {
            // k = 1: a step right after each backward, in the same tick.
            CHECK(event.gradients == 1);
            CHECK(event.micro_batch + 2 * (J - 1) == event.tick + event.stage);
        }
    }
    CHECK(backwards == J * 9);
}

TEST_CASE("pipeline: after an epoch of M micro-batches every stage has applied exactly M gradients")
{
    constexpr std::size_t J = 3;
    for (std::size_t accumulation : {1, 2, 4}) {
        CAPTURE(accumulation);
        const test::micro_batches data(7, 4, 8); // 7 is not a multiple of 2 or 4
        auto parameters = pipeline_network::make_parameters<float>(1);
        recorder trace;
        sequential_pipeline<pipeline_network, cuts_of<J>, sgd<float>> pipeline(
            parameters, plain_sgd, test::constant_rate, {.batch = 4, .accumulation = accumulation});
        pipeline.set_trace(std::ref(trace));
        const auto epochs = test::train_epochs(pipeline, data, 2);
        for (std::size_t stage = 0; stage < J; ++stage) {
            CAPTURE(stage);
            std::size_t applied = 0, steps = 0;
            for (const auto& event : trace.events) {
                if (event.stage == stage && event.what == pipeline_event<float>::kind::step) {
                    applied += event.gradients;
                    ++steps;
                }
            }
            CHECK(applied == 2 * 7);
            CHECK(steps == 2 * ((7 + accumulation - 1) / accumulation));
        }
        CHECK(epochs[0].micro_batches == 7);
        CHECK(epochs[1].micro_batches == 7);
    }
}

TEST_CASE("pipeline: with input and parameter buffers, the gradients are those of delayed backprop with stashed "
          "weights")
{
    constexpr std::size_t J = 3;
    constexpr auto cuts = cuts_of<J>;
    const test::micro_batches data(8, 4, 9);
    auto parameters = pipeline_network::make_parameters<float>(2);
    recorder trace;
    {
        sequential_pipeline<pipeline_network, cuts, sgd<float>> pipeline(
            parameters, plain_sgd, test::constant_rate,
            {.batch = 4, .accumulation = 1, .input_buffer = true, .parameter_buffer = true});
        pipeline.set_trace(std::ref(trace));
        test::train_epochs(pipeline, data, 1);
    }
    // Micro-batch m's true gradient: exact backprop through the network
    // whose stage j has the parameters stage j used for m's forward.
    exact_backprop<pipeline_network, float> exact(4);
    for (std::size_t m = 0; m < 8; ++m) {
        CAPTURE(m);
        auto at_forward = pipeline_network::make_parameters<float>(2);
        for (std::size_t j = 0; j < J; ++j) {
            const auto& used = trace.forward_parameters.at({j, m});
            std::copy(used.begin(), used.end(),
                      at_forward.values().begin() + pipeline_network::parameter_offsets[cuts[j]]);
        }
        std::vector<float> gradient(pipeline_network::parameter_count, 0.0f);
        exact.accumulate_gradient(at_forward, 4, data.images[m].data(), data.labels[m].data(), gradient);
        for (std::size_t j = 0; j < J; ++j) {
            CAPTURE(j);
            const std::size_t begin = pipeline_network::parameter_offsets[cuts[j]];
            const auto& applied = trace.step_gradients.at({j, m});
            const double difference = test::relative_distance(
                std::span<const float>(applied), std::span<const float>(gradient).subspan(begin, applied.size()));
            INFO("relative difference " << difference);
            CHECK(difference < 1e-5);
        }
    }
}

namespace {

// PETRA (no buffers) with a constant learning rate: per stage, the relative
// distance between the gradient applied for micro-batch m and the gradient
// at the parameters of m's forward (delayed backprop with stashed weights).
template <std::size_t J>
std::vector<double> petra_gradient_error(double learning_rate, std::size_t m)
{
    constexpr auto cuts = cuts_of<J>;
    const test::micro_batches data(m + 2, 4, 9);
    auto parameters = pipeline_network::make_parameters<float>(2);
    recorder trace;
    {
        sequential_pipeline<pipeline_network, cuts, sgd<float>> pipeline(
            parameters, plain_sgd, [learning_rate](std::size_t) { return learning_rate; }, {.batch = 4});
        pipeline.set_trace(std::ref(trace));
        test::train_epochs(pipeline, data, 1);
    }
    auto at_forward = pipeline_network::make_parameters<float>(2);
    for (std::size_t j = 0; j < J; ++j) {
        const auto& used = trace.forward_parameters.at({j, m});
        std::copy(used.begin(), used.end(), at_forward.values().begin() + pipeline_network::parameter_offsets[cuts[j]]);
    }
    exact_backprop<pipeline_network, float> exact(4);
    std::vector<float> gradient(pipeline_network::parameter_count, 0.0f);
    exact.accumulate_gradient(at_forward, 4, data.images[m].data(), data.labels[m].data(), gradient);
    std::vector<double> errors;
    for (std::size_t j = 0; j < J; ++j) {
        const auto& applied = trace.step_gradients.at({j, m});
        errors.push_back(test::relative_distance(
            std::span<const float>(applied),
            std::span<const float>(gradient).subspan(pipeline_network::parameter_offsets[cuts[j]], applied.size())));
    }
    return errors;
}

} // namespace

TEST_CASE("pipeline: PETRA's gradient error is first order in the learning rate, and zero on the last stage")
{
    // Stage j differentiates micro-batch m with the parameters current at
    // its backward, 2 (J - 1 - j) steps after m's forward, on an input
    // rebuilt with them. The last stage is fresh (and its head recomputes
    // from a stored input): it agrees with the forward's gradient to
    // rounding. Earlier stages differ by an amount proportional to the
    // learning rate (to rounding when it is zero).
    constexpr std::size_t J = 3;
    const auto at_zero = petra_gradient_error<J>(0.0, 6);
    const auto small = petra_gradient_error<J>(1e-5, 6);
    const auto larger = petra_gradient_error<J>(1e-4, 6);
    // Every block its own stage (a coupling before the downsampling, the
    // downsampling before a coupling): at learning rate 0 every stage's
    // gradient is still exact.
    const auto one_block_each = petra_gradient_error<pipeline_network::block_count>(0.0, 12);
    for (std::size_t j = 0; j < one_block_each.size(); ++j) {
        CAPTURE(j);
        CHECK(one_block_each[j] < 1e-5);
    }
    for (std::size_t j = 0; j < J; ++j) {
        CAPTURE(j);
        INFO("errors at learning rates 0, 1e-5, 1e-4: " << at_zero[j] << ", " << small[j] << ", " << larger[j]);
        CHECK(at_zero[j] < 1e-5);
        if (j + 1 == J) {
            CHECK(small[j] < 1e-5);
            CHECK(larger[j] < 1e-5);
        } else {
            CHECK(small[j] > 3 * at_zero[j]);
            CHECK(larger[j] / small[j] > 5.0);
            CHECK(larger[j] / small[j] < 20.0);
        }
    }
}

namespace {

// SGD that throws at its n-th step in the stage whose slice has `size`
// parameters: an error in the middle of a pipeline.
struct failing_sgd {
    struct options {
        std::size_t size;
        std::size_t fail_at_step;
    };
    failing_sgd(const options& settings, std::span<const float> mask) : settings_(settings), size_(mask.size()) {}
    void step(std::span<float>, std::span<const float>, std::size_t, double)
    {
        if (size_ == settings_.size && ++steps_ == settings_.fail_at_step) {
            throw std::runtime_error("injected failure in a stage's optimizer");
        }
    }
    options settings_;
    std::size_t size_;
    std::size_t steps_ = 0;
};

} // namespace

TEST_CASE("pipeline: a failing stage stops every stage and the error reaches the caller" * doctest::timeout(60))
{
    constexpr auto cuts = cuts_of<4>;
    const test::micro_batches data(40, 4, 10);
    const std::size_t middle_size =
        pipeline_network::parameter_offsets[cuts[2]] - pipeline_network::parameter_offsets[cuts[1]];
    auto parameters = pipeline_network::make_parameters<float>(1);
    bool thrown = false;
    try {
        thread_pipeline<pipeline_network, cuts, failing_sgd> pipeline(parameters, {middle_size, 3}, test::constant_rate,
                                                                      {.batch = 4});
        test::train_epochs(pipeline, data, 3);
    } catch (const std::runtime_error& error) {
        thrown = true;
        CHECK(std::string(error.what()) == "injected failure in a stage's optimizer");
    }
    // The pipeline's destructor has joined every thread to get here.
    CHECK(thrown);
}

TEST_CASE("pipeline: a non-finite loss stops training with the stage and micro-batch" * doctest::timeout(60))
{
    constexpr auto cuts = cuts_of<2>;
    test::micro_batches data(10, 4, 11);
    data.images[5].data()[3] = std::nanf("");
    auto parameters = pipeline_network::make_parameters<float>(1);
    thread_pipeline<pipeline_network, cuts, sgd<float>> pipeline(parameters, plain_sgd, test::constant_rate,
                                                                 {.batch = 4});
    // The last stage's blocks, wherever the cost model cuts.
    const std::string expected = "stage 1 (blocks " + std::to_string(cuts[1]) + " to " + std::to_string(cuts[2] - 1) +
                                 "): the loss of micro-batch 5 of this epoch is not finite (nan).";
    CHECK_THROWS_WITH_AS(test::train_epochs(pipeline, data, 1), expected.c_str(), std::runtime_error);
    // Later calls report the same failure instead of hanging.
    CHECK_THROWS_AS(pipeline.drain(), std::runtime_error);
}

TEST_CASE("pipeline: after a failure the simulator reports it again instead of computing on a broken state")
{
    test::micro_batches data(6, 4, 12);
    data.images[2].data()[0] = std::nanf("");
    auto parameters = pipeline_network::make_parameters<float>(1);
    sequential_pipeline<pipeline_network, cuts_of<2>, sgd<float>> pipeline(parameters, plain_sgd, test::constant_rate,
                                                                           {.batch = 4});
    CHECK_THROWS_AS(test::train_epochs(pipeline, data, 1), std::runtime_error);
    CHECK_THROWS_WITH_AS(pipeline.feed(data.images[0], data.labels[0]), doctest::Contains("is not finite"),
                         std::runtime_error);
    CHECK_THROWS_WITH_AS(pipeline.drain(), doctest::Contains("is not finite"), std::runtime_error);
}

TEST_CASE("pipeline: a stage driven alone must be given somewhere to write its input gradient")
{
    using middle = stage<pipeline_network, cuts_of<3>, 1, float>;
    auto parameters = pipeline_network::make_parameters<float>(1);
    middle alone(parameters, {.batch = 4});
    std::vector<float> x(4 * middle::input_values, 0.5f), y(4 * middle::output_values), grad_y(y.size(), 0.1f);
    alone.forward(test::batch_of<middle::input>(std::as_const(x), 4), test::batch_of<middle::output>(y, 4));
    CHECK_THROWS_AS(alone.backward(test::batch_of<middle::output>(std::as_const(y), 4),
                                   test::batch_of<middle::output>(std::as_const(grad_y), 4),
                                   test::batch_of<middle::input>(x, 4), {}),
                    std::invalid_argument);
}

TEST_CASE("pipeline: bad options are refused")
{
    auto parameters = pipeline_network::make_parameters<float>(1);
    CHECK_THROWS_AS((sequential_pipeline<pipeline_network, cuts_of<2>, sgd<float>>(parameters, plain_sgd,
                                                                                   test::constant_rate, {.batch = 0})),
                    std::invalid_argument);
    CHECK_THROWS_AS((thread_pipeline<pipeline_network, cuts_of<2>, sgd<float>>(
                        parameters, plain_sgd, test::constant_rate, {.batch = 4, .accumulation = 0})),
                    std::invalid_argument);
}

TEST_CASE("pipeline: a bad batch, accumulation or delay rate exponent is refused with one sentence, by either "
          "driver (a bad batch also by a stage alone)")
{
    auto parameters = pipeline_network::make_parameters<float>(1);
    const char* batch = "pipeline: the batch must hold at least one example.";
    const char* accumulation = "pipeline: the accumulation (micro-batches per step) must be at least 1.";
    using simulator = sequential_pipeline<pipeline_network, cuts_of<2>, sgd<float>>;
    using threads = thread_pipeline<pipeline_network, cuts_of<2>, sgd<float>>;
    CHECK_THROWS_WITH_AS(simulator(parameters, plain_sgd, test::constant_rate, {.batch = 0}), batch,
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(threads(parameters, plain_sgd, test::constant_rate, {.batch = 0}), batch,
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(simulator(parameters, plain_sgd, test::constant_rate, {.batch = 4, .accumulation = 0}),
                         accumulation, std::invalid_argument);
    CHECK_THROWS_WITH_AS(threads(parameters, plain_sgd, test::constant_rate, {.batch = 4, .accumulation = 0}),
                         accumulation, std::invalid_argument);
    CHECK_THROWS_WITH_AS((stage<pipeline_network, cuts_of<2>, 0, float>(parameters, {.batch = 0})), batch,
                         std::invalid_argument);
    const char* exponent = "pipeline: the delay rate exponent must be a finite number, 0 or more.";
    for (double bad : {-0.5, std::nan(""), HUGE_VAL}) {
        CAPTURE(bad);
        CHECK_THROWS_WITH_AS(
            simulator(parameters, plain_sgd, test::constant_rate, {.batch = 4, .delay_rate_exponent = bad}), exponent,
            std::invalid_argument);
        CHECK_THROWS_WITH_AS(
            threads(parameters, plain_sgd, test::constant_rate, {.batch = 4, .delay_rate_exponent = bad}), exponent,
            std::invalid_argument);
    }
}

namespace {

// Downsampling by pixel_unshuffle: every block between stem and head
// reversible (a shape-changing one among them), 5 blocks.
using unshuffling_network =
    network<input<1, 6, 6>, stem<chain<conv2d<1, 8>, batch_norm<8>, relu>>, additive_coupling<residual_function<4>>,
            pixel_unshuffle, additive_coupling<residual_function<16>>, classifier_head<32, 3>>;

template <std::size_t J>
void check_unshuffling_threads_equal_simulation()
{
    CAPTURE(J);
    constexpr auto cuts = partition<unshuffling_network, J>();
    const test::micro_batches data(13, 4, 200 + J);
    auto simulated = unshuffling_network::make_parameters<float>(4);
    auto threaded = simulated;
    std::vector<epoch_statistics> simulated_epochs, threaded_epochs;
    {
        sequential_pipeline<unshuffling_network, cuts, sgd<float>> pipeline(simulated, plain_sgd, test::constant_rate,
                                                                            {.batch = 4});
        simulated_epochs = test::train_epochs(pipeline, data, 2);
    }
    {
        thread_pipeline<unshuffling_network, cuts, sgd<float>> pipeline(threaded, plain_sgd, test::constant_rate,
                                                                        {.batch = 4});
        threaded_epochs = test::train_epochs(pipeline, data, 2);
    }
    CHECK(std::equal(simulated.values().begin(), simulated.values().end(), threaded.values().begin()));
    CHECK(std::equal(simulated.state().begin(), simulated.state().end(), threaded.state().begin()));
    for (std::size_t e = 0; e < 2; ++e) CHECK(simulated_epochs[e].loss_sum == threaded_epochs[e].loss_sum);
    // It trained: the second epoch's loss is below the first's.
    CHECK(simulated_epochs[1].mean_loss() < simulated_epochs[0].mean_loss());
}

} // namespace

TEST_CASE("pipeline: a network downsampling by pixel_unshuffle, up to one block per stage, threads equal simulation")
{
    check_unshuffling_threads_equal_simulation<2>();
    check_unshuffling_threads_equal_simulation<5>();
}

namespace {

// A downsampling whose F ends in a layer with no lighter way than its
// forward (test::workspace_scaling): its recomputation writes its output,
// into the buffer its stage lends for it.
template <class Downsampling>
using lending_network =
    network<input<1, 6, 6>, stem<chain<conv2d<1, 8>, batch_norm<8>, relu>>, additive_coupling<residual_function<4>>,
            Downsampling, additive_coupling<residual_function<8>>, classifier_head<16, 3>>;
using writing_downsampling = downsample<chain<conv2d<4, 8, 3, 2>, batch_norm<8>, relu, test::workspace_scaling<1, 2>>,
                                        chain<conv2d<4, 8, 1, 2, 0>, batch_norm<8>>>;
constexpr std::array<std::size_t, 3> lending_cuts{0, 3, 5};

} // namespace

TEST_CASE("pipeline: a stage lends a buffer to a recomputation that writes its output, and threads equal simulation")
{
    using lending = lending_network<writing_downsampling>;
    using not_lending = lending_network<downsampling<4>>;
    const pipeline_options options{.batch = 4};
    // Stage 0 keeps the stem's and the downsampling's inputs; only the
    // downsampling whose F ends in the workspace-scaling layer may write its recomputed output.
    static_assert(recomputation_writes_output<lending::block<2>>());
    static_assert(!recomputation_writes_output<not_lending::block<2>>());
    CHECK(stage<lending, lending_cuts, 0, float>::buffers(options).recomputed ==
          options.batch * lending::block<2>::output::size);
    CHECK(stage<not_lending, lending_cuts, 0, float>::buffers(options).recomputed == 0);

    const test::micro_batches data(9, 4, 300);
    auto simulated = lending::make_parameters<float>(5);
    auto threaded = simulated;
    std::vector<epoch_statistics> simulated_epochs, threaded_epochs;
    {
        sequential_pipeline<lending, lending_cuts, sgd<float>> pipeline(simulated, plain_sgd, test::constant_rate,
                                                                        options);
        simulated_epochs = test::train_epochs(pipeline, data, 2);
    }
    {
        thread_pipeline<lending, lending_cuts, sgd<float>> pipeline(threaded, plain_sgd, test::constant_rate, options);
        threaded_epochs = test::train_epochs(pipeline, data, 2);
    }
    CHECK(std::equal(simulated.values().begin(), simulated.values().end(), threaded.values().begin()));
    for (std::size_t e = 0; e < 2; ++e) {
        CHECK(std::isfinite(simulated_epochs[e].loss_sum));
        CHECK(simulated_epochs[e].loss_sum == threaded_epochs[e].loss_sum);
    }
}

namespace {

// The global micro-batches of `replicas` shards: shard d of global
// micro-batch m is data's micro-batch (m + d x offset) mod M, so that an
// offset of 0 feeds every replica the same shard.
struct global_micro_batches {
    std::vector<owned_batch<float, pipeline_network::input>> images;
    std::vector<std::vector<std::int32_t>> labels;

    global_micro_batches(const test::micro_batches& data, std::size_t replicas, std::size_t offset)
    {
        const std::size_t count = data.images.size(), values = data.batch * pipeline_network::input::size;
        for (std::size_t m = 0; m < count; ++m) {
            owned_batch<float, pipeline_network::input> global(replicas * data.batch);
            std::vector<std::int32_t> global_labels;
            for (std::size_t d = 0; d < replicas; ++d) {
                const std::size_t source = (m + d * offset) % count;
                std::copy_n(data.images[source].data(), values, global.data() + d * values);
                global_labels.insert(global_labels.end(), data.labels[source].begin(), data.labels[source].end());
            }
            images.push_back(std::move(global));
            labels.push_back(std::move(global_labels));
        }
    }
};

template <std::size_t J>
std::vector<epoch_statistics> train_replicas(network_parameters<pipeline_network, float>& parameters,
                                             const global_micro_batches& data, const pipeline_options& options)
{
    test::simulator<J> pipeline(parameters, plain_sgd, test::constant_rate, options);
    std::vector<epoch_statistics> epochs;
    for (std::size_t epoch = 0; epoch < 2; ++epoch) {
        for (std::size_t m = 0; m < data.images.size(); ++m) pipeline.feed(data.images[m], data.labels[m]);
        epochs.push_back(pipeline.drain());
    }
    return epochs;
}

// Replicas fed the same shard each add the same gradient, and the step
// divides by D times as many: D x g x (1 / (D k)) is g x (1 / k) exactly
// for D = 2, so the parameters are those of one pipeline, bit for bit.
template <std::size_t J>
void check_replicas_of_one_shard(std::size_t accumulation)
{
    CAPTURE(J);
    CAPTURE(accumulation);
    const test::micro_batches data(9, 4, 300 + J);
    auto one = pipeline_network::make_parameters<float>(5), two = one, apart = one;
    const auto one_epochs =
        train_replicas<J>(one, global_micro_batches(data, 1, 0), {.batch = 4, .accumulation = accumulation});
    const auto two_epochs = train_replicas<J>(two, global_micro_batches(data, 2, 0),
                                              {.batch = 4, .accumulation = accumulation, .replicas = 2});
    CHECK(std::ranges::equal(one.values(), two.values()));
    CHECK(std::ranges::equal(one.state(), two.state()));
    for (std::size_t e = 0; e < 2; ++e) {
        CHECK(two_epochs[e].micro_batches == 2 * one_epochs[e].micro_batches);
        CHECK(two_epochs[e].examples == 2 * one_epochs[e].examples);
        CHECK(two_epochs[e].correct == 2 * one_epochs[e].correct);
        CHECK(two_epochs[e].loss_sum == 2 * one_epochs[e].loss_sum);
    }
    // Shards of other micro-batches move the parameters elsewhere.
    train_replicas<J>(apart, global_micro_batches(data, 2, 4),
                      {.batch = 4, .accumulation = accumulation, .replicas = 2});
    CHECK(!std::ranges::equal(one.values(), apart.values()));
}

} // namespace

TEST_CASE("pipeline: simulated replicas fed the same shard compute what one pipeline computes, bit for bit")
{
    for (std::size_t accumulation : {1, 3}) {
        check_replicas_of_one_shard<1>(accumulation);
        check_replicas_of_one_shard<2>(accumulation);
        check_replicas_of_one_shard<3>(accumulation);
    }
}

TEST_CASE("pipeline: replicas of 0, replicas on threads and a simulator's checkpoint of replicas are refused")
{
    auto parameters = pipeline_network::make_parameters<float>(1);
    CHECK_THROWS_WITH_AS(test::simulator<2>(parameters, plain_sgd, test::constant_rate, {.batch = 4, .replicas = 0}),
                         "pipeline: the replicas must be at least 1.", std::invalid_argument);
    CHECK_THROWS_WITH_AS(test::threads<2>(parameters, plain_sgd, test::constant_rate, {.batch = 4, .replicas = 2}),
                         "thread pipeline: it runs one copy of the pipeline; replicas run on the simulator or on MPI "
                         "ranks.",
                         std::invalid_argument);
    test::simulator<2> pipeline(parameters, plain_sgd, test::constant_rate, {.batch = 4, .replicas = 2});
    checkpoint_writer writer(test::temporary_path("replicas.checkpoint"), 1);
    CHECK_THROWS_WITH_AS(pipeline.transfer_stage_state(0, writer),
                         "sequential pipeline: a pipeline with replicas is checkpointed on MPI ranks "
                         "(mpi/checkpoint.hpp), not on the simulator.",
                         std::logic_error);
}
