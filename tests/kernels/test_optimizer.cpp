// The fused SGD update against its scalar reference, over several steps, for
// plain momentum and Nesterov, with and without weight decay and masks.
#include <cmath>
#include <cstddef>
#include <random>
#include <vector>

#include <doctest/doctest.h>

#include <petra/kernels/optimizer.hpp>

#include "reference/optimizer.hpp"
#include "support.hpp"

using namespace petra;

TEST_CASE_TEMPLATE("sgd_update matches the reference over several steps", T, float, double)
{
    std::mt19937_64 generator(1);
    for (std::size_t n : {0, 1, 7, 16, 33, 257}) {
        for (bool nesterov : {false, true}) {
            for (double weight_decay : {0.0, 5e-4}) {
                CAPTURE(n);
                CAPTURE(nesterov);
                CAPTURE(weight_decay);
                auto parameters = test::random_vector<T>(n, generator);
                std::vector<T> velocity(n, T(0)), mask(n);
                for (std::size_t i = 0; i < n; ++i) mask[i] = T(i % 3 != 0); // every third parameter does not decay
                std::vector<long double> expected_parameters(parameters.begin(), parameters.end()),
                    expected_velocity(n, 0.0L);
                const kernels::sgd_coefficients<T> c{T(0.05), T(0.9), T(weight_decay), T(0.5), nesterov};
                for (int step = 0; step < 5; ++step) {
                    const auto gradient = test::random_vector<T>(n, generator);
                    kernels::sgd_update(n, c, mask.data(), gradient.data(), velocity.data(), parameters.data());
                    reference::sgd_update<T>(c.learning_rate, c.momentum, c.weight_decay, c.gradient_scale, nesterov,
                                             mask, gradient, expected_velocity, expected_parameters);
                }
                for (std::size_t i = 0; i < n; ++i) {
                    CHECK(double(parameters[i]) == doctest::Approx(double(expected_parameters[i]))
                                                       .epsilon(20 * test::accumulation_tolerance<T>(1)));
                    CHECK(double(velocity[i]) == doctest::Approx(double(expected_velocity[i]))
                                                     .epsilon(20 * test::accumulation_tolerance<T>(1))
                                                     .scale(1.0));
                }
            }
        }
    }
}

TEST_CASE("sgd_update: weight decay reaches exactly the parameters the mask marks")
{
    // Zero gradient, no momentum: only decay moves a parameter.
    std::vector<float> parameters{1.0f, 2.0f, 3.0f}, velocity(3, 0.0f), mask{1.0f, 0.0f, 1.0f}, gradient(3, 0.0f);
    kernels::sgd_update<float>(3, {0.1f, 0.0f, 0.5f, 1.0f, false}, mask.data(), gradient.data(), velocity.data(),
                               parameters.data());
    CHECK(parameters[0] == doctest::Approx(1.0f - 0.1f * 0.5f * 1.0f));
    CHECK(parameters[1] == 2.0f);
    CHECK(parameters[2] == doctest::Approx(3.0f - 0.1f * 0.5f * 3.0f));
}
