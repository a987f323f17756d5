// Finite-difference check of a bound layer's backward pass, in double.
//
// The layer's output is projected on a fixed random direction r, giving the
// scalar L(x, parameters) = sum of r * forward(x, parameters). backward with
// grad_y = r must then return dL/dx and dL/dparameters, which are compared,
// value by value, with central differences (L(v + h) - L(v - h)) / 2h.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <random>
#include <span>
#include <type_traits>
#include <vector>

#include <doctest/doctest.h>

#include <petra/layers/layer.hpp>

#include "support.hpp"

namespace petra::test {

struct gradient_check_options {
    std::size_t batch = 3;
    double step = 1e-5;
    double tolerance = 1e-6;     // on the largest error relative to the largest gradient value
    double smallest_input = 0.0; // inputs are drawn with |x| >= this (away from ReLU kinks)
};

// Largest |a - b| over the largest |b| (at least tiny): the relative error of
// a whole gradient vector.
inline double relative_error(const std::vector<double>& a, const std::vector<double>& b)
{
    double error = 0.0, scale = 1e-300;
    for (std::size_t i = 0; i < a.size(); ++i) {
        error = std::max(error, std::abs(a[i] - b[i]));
        scale = std::max(scale, std::abs(b[i]));
    }
    return error / scale;
}

// The forward differentiated is a training pass; the finite differences
// evaluate recomputation passes, which leave the running statistics alone.
template <class Bound>
void check_gradients(std::mt19937_64& generator, const gradient_check_options& options = {})
{
    using input = typename Bound::input;
    using output = typename Bound::output;
    const std::size_t batch = options.batch;

    std::vector<double> parameters(Bound::parameter_count), state(Bound::state_count + 1);
    Bound::initialize(span_of<Bound::parameter_count>(parameters), span_of<Bound::state_count>(state), generator);
    // Random parameters around the initial ones, so that no symmetry (gamma = 1,
    // bias = 0) hides an error.
    for (double& value : parameters) value += 0.5 * uniform_real(generator, -1.0, 1.0);
    std::vector<double> x(batch * input::size);
    for (double& value : x) {
        do value = uniform_real(generator, -1.0, 1.0);
        while (std::abs(value) < options.smallest_input);
    }
    std::vector<double> direction(batch * output::size);
    for (double& value : direction) value = uniform_real(generator, -1.0, 1.0);

    std::vector<double> y(batch * output::size), workspace(Bound::workspace_size(batch) + 1);
    auto objective = [&](const std::vector<double>& at_x, const std::vector<double>& at_parameters) {
        std::vector<double> scratch_cache(Bound::workspace_size(batch) + 1), out(y.size());
        Bound::forward(petra::pass::recomputation, span_of<Bound::parameter_count>(at_parameters),
                       span_of<Bound::state_count>(state), batch_of<input>(at_x, batch), batch_of<output>(out, batch),
                       std::span<double>(scratch_cache));
        double sum = 0.0;
        for (std::size_t i = 0; i < out.size(); ++i) sum += direction[i] * out[i];
        return sum;
    };

    Bound::forward(petra::pass::training, span_of<Bound::parameter_count>(parameters),
                   span_of<Bound::state_count>(state), batch_of<input>(x, batch), batch_of<output>(y, batch),
                   std::span<double>(workspace));
    std::vector<double> grad_x(x.size(), std::nan("")), grad_parameters(parameters.size(), 0.0);
    Bound::backward(span_of<Bound::parameter_count>(parameters), batch_of<input>(x, batch),
                    batch_of<output>(direction, batch), batch_of<input>(grad_x, batch),
                    span_of<Bound::parameter_count>(grad_parameters), std::span<double>(workspace));

    auto numeric = [&](std::vector<double> values, bool of_parameters) {
        std::vector<double> derivative(values.size());
        for (std::size_t i = 0; i < values.size(); ++i) {
            const double original = values[i];
            values[i] = original + options.step;
            const double above = of_parameters ? objective(x, values) : objective(values, parameters);
            values[i] = original - options.step;
            const double below = of_parameters ? objective(x, values) : objective(values, parameters);
            values[i] = original;
            derivative[i] = (above - below) / (2 * options.step);
        }
        return derivative;
    };
    const double input_error = relative_error(grad_x, numeric(x, false));
    INFO("input gradient relative error " << input_error);
    CHECK(input_error < options.tolerance);
    if (Bound::parameter_count > 0) {
        const double parameter_error = relative_error(grad_parameters, numeric(parameters, true));
        INFO("parameter gradient relative error " << parameter_error);
        CHECK(parameter_error < options.tolerance);
    }
}

} // namespace petra::test
