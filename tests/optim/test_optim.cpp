// The optimizer floor: SGD against its formula over a few steps, its input
// checks, the learning-rate schedules and the scaling rule.
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <vector>

#include <doctest/doctest.h>

#include <petra/optim.hpp>

using namespace petra;

TEST_CASE("sgd: Nesterov momentum with weight decay on weights only, gradient averaged over micro-batches")
{
    std::vector<double> parameters{1.0, -2.0}, mask{1.0, 0.0};
    sgd<double> optimizer({.momentum = 0.9, .nesterov = true, .weight_decay = 0.01}, mask);
    double v0 = 0.0, v1 = 0.0, p0 = 1.0, p1 = -2.0;
    for (int step = 0; step < 3; ++step) {
        const std::vector<double> gradient_sum{0.4, 0.6}; // two micro-batches
        optimizer.step(parameters, gradient_sum, 2, 0.1);
        const double g0 = 0.2 + 0.01 * p0, g1 = 0.3;
        v0 = 0.9 * v0 + g0;
        v1 = 0.9 * v1 + g1;
        p0 -= 0.1 * (g0 + 0.9 * v0);
        p1 -= 0.1 * (g1 + 0.9 * v1);
        CHECK(parameters[0] == doctest::Approx(p0).epsilon(1e-14));
        CHECK(parameters[1] == doctest::Approx(p1).epsilon(1e-14));
        CHECK(optimizer.velocity()[1] == doctest::Approx(v1).epsilon(1e-14));
    }
}

TEST_CASE("sgd: settings out of range are refused")
{
    std::vector<float> mask(3, 1.0f);
    CHECK_THROWS_WITH_AS(sgd<float>({.momentum = 1.0}, mask), "sgd: the momentum must be in [0, 1), not 1.000000.",
                         std::invalid_argument);
    CHECK_THROWS_AS(sgd<float>({.weight_decay = -1.0}, mask), std::invalid_argument);
}

TEST_CASE("learning-rate schedules: warm-up, step decay, cosine")
{
    const learning_rate_schedule constant{.peak = 0.2, .warmup_steps = 4};
    CHECK(constant(0) == doctest::Approx(0.05));
    CHECK(constant(3) == doctest::Approx(0.2));
    CHECK(constant(1000) == doctest::Approx(0.2));

    const learning_rate_schedule steps{
        .peak = 1.0, .shape = learning_rate_schedule::decay::step, .milestones = {10, 20}, .factor = 0.1};
    CHECK(steps(9) == doctest::Approx(1.0));
    CHECK(steps(10) == doctest::Approx(0.1));
    CHECK(steps(25) == doctest::Approx(0.01));

    const learning_rate_schedule cosine{
        .peak = 1.0, .warmup_steps = 10, .shape = learning_rate_schedule::decay::cosine, .total_steps = 110};
    CHECK(cosine(9) == doctest::Approx(1.0));
    CHECK(cosine(10) == doctest::Approx(1.0));
    CHECK(cosine(60) == doctest::Approx(0.5));
    CHECK(cosine(110) == doctest::Approx(0.0));
    CHECK(cosine(500) == doctest::Approx(0.0));
}

TEST_CASE("the scaling rule: 0.1 per 256 examples per step")
{
    static_assert(scaled_learning_rate(256, 1) == 0.1);
    CHECK(scaled_learning_rate(64, 1) == doctest::Approx(0.025));
    CHECK(scaled_learning_rate(64, 2) == doctest::Approx(0.05));
}
