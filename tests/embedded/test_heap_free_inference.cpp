// Inference without the heap: predict in the caller's workspace, with
// parameters in the caller's storage, allocates nothing, not even on its
// first call. This executable replaces malloc (which operator new and the
// aligned buffers both reach) with a counting one. Not built with
// sanitizers, which replace malloc themselves.
#include <array>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <random>
#include <vector>

#include <doctest/doctest.h>

#include <petra/petra.hpp>

#include "counting_malloc.hpp"

using namespace petra;
using net = reference_network<>;

namespace {

constexpr std::size_t batch = 4;
// The caller's storage, static: parameters, running statistics, the
// workspace (any alignment), and the data.
std::array<float, net::parameter_count> values;
std::array<float, net::state_count> state;
std::array<std::byte, net::inference_workspace_bytes(batch)> workspace;
std::array<float, batch * net::input::size> images;
std::array<float, batch * net::output::size> logits;

// A model compiled into the program (see test_network.cpp for its numbers).
using tiny_network = network<input<2>, stem<dense<2, 4>>, additive_coupling<dense<2, 2>>, head<dense<4, 2>>>;
constexpr std::array<float, tiny_network::parameter_count> tiny_values{
    1, 0, 0, 1, 1, 1, 1, -1, 0, 0, 0, 0.5f, 2, 0, 0, 2, 0, 1, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0};
constexpr std::array<float, tiny_network::state_count> tiny_state{};
std::array<std::byte, tiny_network::inference_workspace_bytes(1)> tiny_workspace;

} // namespace

TEST_CASE("predict in the caller's workspace, with parameters in the caller's storage, allocates nothing")
{
    const network_parameters_view<net, float> parameters(values, state);
    std::mt19937_64 generator(1);
    std::uniform_real_distribution<float> pixel(0.0f, 1.0f);

    const std::size_t before = test::allocations.load();
    initialize_parameters(parameters, 1);
    for (float& value : images) value = pixel(generator);
    predict(network_parameters_view<net, const float>(parameters), batch, images.data(), logits.data(), workspace);
    CHECK(test::allocations.load() == before);

    // The numbers of predict with per-thread memory (which allocates).
    const auto owned = net::make_parameters<float>(1);
    CHECK(std::equal(values.begin(), values.end(), owned.values().begin()));
    std::vector<float> expected(logits.size());
    predict(owned, batch, images.data(), expected.data());
    CHECK(std::equal(logits.begin(), logits.end(), expected.begin()));
    for (float value : logits) CHECK(std::isfinite(value));

    // A model compiled into the program, in a static workspace: nothing either.
    const std::array<float, 2> point{1, 2};
    std::array<float, 2> scores{};
    const std::size_t before_tiny = test::allocations.load();
    constexpr network_parameters_view<tiny_network, const float> trained(tiny_values, tiny_state);
    predict(trained, 1, point.data(), scores.data(), tiny_workspace);
    CHECK(test::allocations.load() == before_tiny);
    CHECK(scores == std::array<float, 2>{5, 1});
}

TEST_CASE("predict with per-thread memory allocates only on its first call for a batch")
{
    const auto parameters = net::make_parameters<float>(2);
    std::vector<float> out(logits.size());
    predict(parameters, batch, images.data(), out.data());
    const std::size_t before = test::allocations.load();
    predict(parameters, batch, images.data(), out.data());
    predict(parameters, 1, images.data(), out.data());
    CHECK(test::allocations.load() == before);
    // The counter sees aligned buffers.
    const auto more = net::make_parameters<float>(3);
    CHECK(test::allocations.load() >= before + 2);
}
