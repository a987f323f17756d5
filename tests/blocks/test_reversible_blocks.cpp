// Every reversible block: inverse(forward(x)) gives x back; the fused
// reconstruct-and-backward gives the input back and the gradients of central
// differences; with perturbed weights (PETRA's situation) the reconstruction
// error grows smoothly with the perturbation.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include <petra/blocks.hpp>
#include <petra/layers.hpp>

#include "blocks/block_as_layer.hpp"
#include "layers/gradient_check.hpp"
#include "support.hpp"

using namespace petra;

namespace {

template <std::size_t C>
using residual = chain<conv2d<C, C, 3>, batch_norm<C>, relu, conv2d<C, C, 3>, batch_norm<C>, relu>;

using block_input = halves<shape<4, 6, 6>>;
using additive = layer_for<additive_coupling<residual<4>>, block_input>;
using revnet = layer_for<revnet_coupling<residual<4>, residual<4>>, block_input>;

template <class coupling, class T>
struct coupling_setup {
    std::size_t batch;
    std::vector<T> parameters, state, x, y, workspace;

    coupling_setup(std::size_t batch_size, std::uint64_t seed)
        : batch(batch_size), parameters(coupling::parameter_count), state(coupling::state_count),
          x(batch_size * coupling::input::size), y(x.size()), workspace(coupling::workspace_size(batch_size))
    {
        std::mt19937_64 generator(seed);
        coupling::initialize(test::span_of<coupling::parameter_count>(parameters),
                             test::span_of<coupling::state_count>(state), generator);
        for (T& value : parameters) value += T(0.2) * uniform_real(generator, T(-1), T(1));
        for (T& value : x) value = uniform_real(generator, T(-1), T(1));
        coupling::forward(pass::training, test::span_of<coupling::parameter_count>(parameters),
                          test::span_of<coupling::state_count>(state), test::batch_of<block_input>(x, batch),
                          test::batch_of<block_input>(y, batch), std::span<T>(workspace));
    }

    // The input rebuilt from y with the given parameters.
    std::vector<T> inverse(const std::vector<T>& with_parameters)
    {
        std::vector<T> reconstructed(x.size());
        coupling::inverse(test::span_of<coupling::parameter_count>(with_parameters),
                          test::span_of<coupling::state_count>(std::as_const(state)),
                          test::batch_of<block_input>(std::as_const(y), batch),
                          test::batch_of<block_input>(reconstructed, batch), std::span<T>(workspace));
        return reconstructed;
    }
};

} // namespace

TEST_CASE("reversible blocks: shapes and counts come from their functions")
{
    static_assert(std::is_same_v<additive::output, block_input>);
    static_assert(additive::parameter_count == 2 * (4 * 4 * 9) + 2 * 8);
    static_assert(revnet::parameter_count == 2 * additive::parameter_count);
    static_assert(additive::reversible && revnet::reversible);
}

TEST_CASE_TEMPLATE("reversible blocks: inverse(forward(x)) == x in float", coupling, additive, revnet)
{
    for (std::uint64_t seed : {1, 2, 3}) {
        coupling_setup<coupling, float> setup(3, seed);
        const std::vector<float> reconstructed = setup.inverse(setup.parameters);
        const double error = test::relative_distance(reconstructed, setup.x);
        INFO("seed " << seed << ": relative reconstruction error " << error);
        CHECK(error < 1e-6);
    }
}

TEST_CASE_TEMPLATE("reversible blocks: reconstruct-and-backward matches central differences", coupling, additive,
                   revnet)
{
    std::mt19937_64 generator(4);
    test::check_gradients<test::reconstruct_then_backward<coupling>>(generator, {.batch = 2});
}

TEST_CASE_TEMPLATE("reversible blocks: backward after forward matches central differences", coupling, additive, revnet)
{
    std::mt19937_64 generator(7);
    test::check_gradients<test::backward_after_forward<coupling>>(generator, {.batch = 2});
}

TEST_CASE_TEMPLATE("reversible blocks: reconstruction error grows smoothly with a weight perturbation", coupling,
                   additive, revnet)
{
    coupling_setup<coupling, double> setup(3, 5);
    std::mt19937_64 generator(6);
    std::vector<double> direction(setup.parameters.size());
    fill_normal(std::span<double>(direction), 0.0, 1.0, generator);
    std::vector<double> errors;
    for (double size : {1e-4, 1e-3, 1e-2}) {
        auto perturbed = setup.parameters;
        for (std::size_t i = 0; i < perturbed.size(); ++i) perturbed[i] += size * direction[i];
        const std::vector<double> reconstructed = setup.inverse(perturbed);
        errors.push_back(test::relative_distance(reconstructed, setup.x));
        INFO("perturbation " << size << ": relative reconstruction error " << errors.back());
        CHECK(errors.back() > 0.0);
    }
    // Small perturbations: the error is first order in their size, so each
    // tenfold step multiplies it by about ten.
    for (std::size_t i = 1; i < errors.size(); ++i) {
        const double ratio = errors[i] / errors[i - 1];
        INFO("error ratio " << ratio);
        CHECK(ratio > 5.0);
        CHECK(ratio < 20.0);
    }
}

TEST_CASE("pixel_unshuffle: 2 x 2 neighbourhoods become channels, and back exactly")
{
    using unshuffle = layer_for<pixel_unshuffle, block_input>;
    static_assert(std::is_same_v<unshuffle::output, halves<shape<16, 3, 3>>>);
    static_assert(unshuffle::reversible && unshuffle::parameter_count == 0 &&
                  unshuffle::input::size == unshuffle::output::size);
    static_assert(!block_accepts<pixel_unshuffle, halves<shape<4, 5, 6>>>(), "odd sizes are refused");
    const std::size_t batch = 3;
    std::mt19937_64 generator(21);
    const auto x = test::random_vector<float>(batch * block_input::size, generator);
    std::vector<float> y(x.size()), back(x.size(), std::nanf(""));
    unshuffle::forward(pass::training, std::span<const float, 0>(), std::span<float, 0>(),
                       test::batch_of<block_input>(x, batch), test::batch_of<unshuffle::output>(y, batch), {});
    // Second half (x~) of example 1, channel 2, pixel (3, 4) = (2 * 1 + 1, 2 * 2 + 0):
    // channel 4 * 2 + 2 * 1 + 0 = 10, pixel (1, 2) of the output half.
    const std::size_t in = ((batch + 1) * 4 + 2) * 36 + 3 * 6 + 4;
    const std::size_t out = ((batch + 1) * 16 + 10) * 9 + 1 * 3 + 2;
    CHECK(y[out] == x[in]);
    unshuffle::inverse(std::span<const float, 0>(), std::span<const float, 0>(),
                       test::batch_of<unshuffle::output>(std::as_const(y), batch),
                       test::batch_of<block_input>(back, batch), {});
    CHECK(back == x);
}

TEST_CASE("pixel_unshuffle: reconstruct-and-backward and backward after forward match central differences")
{
    using unshuffle = layer_for<pixel_unshuffle, block_input>;
    std::mt19937_64 generator(22);
    test::check_gradients<test::reconstruct_then_backward<unshuffle>>(generator, {.batch = 2});
    test::check_gradients<test::backward_after_forward<unshuffle>>(generator, {.batch = 2});
}

// A buffer laid out as exact backprop and the stages lay out theirs
// (boundary_layout.hpp): the output a half below the input in the forward,
// the rebuilt input a half above the output in the inverse, the input
// gradient a half below the output gradient in the backward. The coupling
// then finds the passed-through half in place; every value, and the
// parameter gradient, equals those of separate buffers to the bit.
TEST_CASE("additive coupling: buffers that share the passed-through half give the values of separate ones")
{
    static_assert(passes_first_half_through_of<additive> && !passes_first_half_through_of<revnet>);
    constexpr std::size_t batch = 3;
    coupling_setup<additive, float> setup(batch, 11);
    const std::size_t half = batch * additive::half::size;
    const auto parameters = test::span_of<additive::parameter_count>(std::as_const(setup.parameters));
    const auto state = test::span_of<additive::state_count>(std::as_const(setup.state));
    // Three halves [A | B | C]: y at A and x at B (forward and inverse),
    // grad_x at A and grad_y at B (backward).
    std::vector<float> shared(3 * half);
    const auto at = [&](std::size_t halves) {
        return batch_view<float, block_input>(shared.data() + halves * half, batch);
    };
    const auto read_at = [&](std::size_t halves) {
        return batch_view<const float, block_input>(shared.data() + halves * half, batch);
    };

    // Forward: x = [B | C], y = [A | B].
    std::copy(setup.x.begin(), setup.x.end(), shared.begin() + std::ptrdiff_t(half));
    std::vector<float> workspace(setup.workspace.size());
    additive::forward(pass::training, parameters, test::span_of<additive::state_count>(setup.state), read_at(1), at(0),
                      std::span<float>(workspace));
    CHECK(std::equal(setup.y.begin(), setup.y.end(), shared.begin()));
    CHECK(std::equal(setup.x.begin() + std::ptrdiff_t(half), setup.x.end(), shared.begin() + std::ptrdiff_t(2 * half)));

    // Inverse: y = [A | B], x = [B | C].
    const std::vector<float> separate = setup.inverse(setup.parameters);
    std::fill(shared.begin(), shared.end(), 0.0f);
    std::copy(setup.y.begin(), setup.y.end(), shared.begin());
    additive::inverse(parameters, state, read_at(0), at(1), std::span<float>(workspace));
    CHECK(std::equal(separate.begin(), separate.end(), shared.begin() + std::ptrdiff_t(half)));

    // Backward: grad_y = [B | C], grad_x = [A | B].
    std::mt19937_64 generator(12);
    std::vector<float> grad_y(setup.y.size()), grad_x(grad_y.size());
    for (float& value : grad_y) value = uniform_real(generator, -1.0f, 1.0f);
    std::vector<float> separate_gradient(additive::parameter_count), shared_gradient(additive::parameter_count);
    additive::forward(pass::training, parameters, test::span_of<additive::state_count>(setup.state),
                      test::batch_of<block_input>(std::as_const(setup.x), batch),
                      test::batch_of<block_input>(setup.y, batch), std::span<float>(setup.workspace));
    additive::backward(parameters, test::batch_of<block_input>(std::as_const(setup.x), batch),
                       test::batch_of<block_input>(std::as_const(grad_y), batch),
                       test::batch_of<block_input>(grad_x, batch),
                       test::span_of<additive::parameter_count>(separate_gradient), std::span<float>(setup.workspace));
    std::fill(shared.begin(), shared.end(), 0.0f);
    std::copy(grad_y.begin(), grad_y.end(), shared.begin() + std::ptrdiff_t(half));
    additive::backward(parameters, test::batch_of<block_input>(std::as_const(setup.x), batch), read_at(1), at(0),
                       test::span_of<additive::parameter_count>(shared_gradient), std::span<float>(setup.workspace));
    CHECK(std::equal(grad_x.begin(), grad_x.end(), shared.begin()));
    CHECK(separate_gradient == shared_gradient);
}
