// Inference without the heap: predict in the caller's workspace, with
// parameters in the caller's storage, allocates nothing, not even on its
// first call. This executable replaces malloc (which operator new and the
// aligned buffers both reach) with a counting one. Not built with
// sanitizers, which replace malloc themselves.
#include <array>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <petra/interchange/npz.hpp>
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
// clang-format off
constexpr std::array<float, tiny_network::parameter_count> tiny_values{
    1, 0, 0, 1, 1, 1, 1, -1, 0, 0, 0, 0.5f, 2, 0, 0, 2, 0, 1, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0};
// clang-format on
constexpr std::array<float, tiny_network::state_count> tiny_state{};
std::array<std::byte, tiny_network::inference_workspace_bytes(1)> tiny_workspace;

} // namespace

TEST_CASE("predict in the caller's workspace, with parameters in the caller's storage, allocates nothing")
{
    const network_parameters_view<net, float> parameters(values, state);
    std::mt19937_64 generator(1);

    const std::size_t before = test::allocations.load();
    initialize_parameters(parameters, 1);
    for (float& value : images) value = uniform_float(generator);
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

TEST_CASE("weights loaded from an .npz file's bytes into the caller's storage: no allocation, then predict")
{
    // The file, made with the heap (as a host would make it before
    // flashing it), then read into memory.
    auto trained = net::make_parameters<float>(4);
    for (std::size_t i = 0; i < net::state_count; ++i) trained.state()[i] = 0.5f + float(i % 5);
    const std::string path = "heap_free_weights.npz";
    save_npz(path, trained);
    std::vector<std::byte> file;
    {
        std::FILE* handle = std::fopen(path.c_str(), "rb");
        REQUIRE(handle != nullptr);
        for (int c; (c = std::fgetc(handle)) != EOF;) file.push_back(std::byte(c));
        std::fclose(handle);
    }
    std::remove(path.c_str());

    const network_parameters_view<net, float> parameters(values, state);
    const std::size_t before = test::allocations.load();
    load_npz(std::span<const std::byte>(file), parameters, "weights");
    predict(network_parameters_view<net, const float>(parameters), batch, images.data(), logits.data(), workspace);
    CHECK(test::allocations.load() == before);

    CHECK(std::equal(values.begin(), values.end(), trained.values().begin()));
    CHECK(std::equal(state.begin(), state.end(), trained.state().begin()));
    std::vector<float> expected(logits.size());
    predict(trained, batch, images.data(), expected.data());
    CHECK(std::equal(logits.begin(), logits.end(), expected.begin()));
}
