// The kernels' profiling hooks (kernels/profile.hpp), compiled on: calls,
// FLOPs and bytes summed per kind and geometry, nested kernels counted once,
// tables merged and cleared. Elapsed times are recorded but never asserted.
#define PETRA_PROFILE_KERNELS
#include <petra/kernels.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

namespace {

namespace kernels = petra::kernels;
namespace profile = petra::kernels::profile;

static_assert(profile::enabled, "this test compiles the hooks in");

const profile::record* find(const profile::table& table, const std::string& kind, const std::string& geometry)
{
    for (const profile::record& record : table.records()) {
        if (record.kind == kind && record.geometry() == geometry) return &record;
    }
    return nullptr;
}

std::uint64_t total_calls(const profile::table& table)
{
    std::uint64_t calls = 0;
    for (const profile::record& record : table.records()) calls += record.calls;
    return calls;
}

} // namespace

TEST_CASE("calls of one kind and size add up in one record; other sizes get their own")
{
    profile::this_thread().clear();
    std::vector<float> x(100, 1.0f), y(100, 2.0f), out(100);
    for (int i = 0; i < 3; ++i) kernels::add(x.size(), x.data(), y.data(), out.data());
    kernels::add(std::size_t(10), x.data(), y.data(), out.data());
    CHECK(out[0] == 3.0f); // the kernels still compute
    kernels::relu_forward(x.size(), x.data(), out.data());
    kernels::relu_forward(x.size(), out.data(), out.data());

    const profile::table& table = profile::this_thread();
    REQUIRE(table.records().size() == 3);
    const profile::record* add_100 = find(table, "add", "100 values");
    REQUIRE(add_100 != nullptr);
    CHECK(add_100->calls == 3);
    CHECK(add_100->flops == 300.0);
    CHECK(add_100->bytes == 3.0 * 3 * 100 * sizeof(float));
    const profile::record* add_10 = find(table, "add", "10 values");
    REQUIRE(add_10 != nullptr);
    CHECK(add_10->calls == 1);
    const profile::record* relu = find(table, "relu_forward", "100 values");
    REQUIRE(relu != nullptr);
    CHECK(relu->calls == 2);
    CHECK(relu->flops == 0.0);
    CHECK(relu->bytes == 2.0 * 2 * 100 * sizeof(float));
    CHECK(total_calls(table) == 6);
}

TEST_CASE("a convolution is one record per pass, keyed by its geometry, with the shape's FLOPs")
{
    profile::this_thread().clear();
    const kernels::convolution_shape shape{2, 3, 6, 6, 4, 3, 2, 1};
    std::vector<float> input(shape.input_count(), 0.5f), weights(shape.weight_count(), 0.25f),
        output(shape.output_count()), grad_x(shape.input_count()), grad_weights(shape.weight_count());
    kernels::convolution_forward(shape, input.data(), weights.data(), output.data());
    kernels::convolution_backward_input(shape, output.data(), weights.data(), grad_x.data());
    kernels::convolution_backward_weights(shape, input.data(), output.data(), grad_weights.data(), 1.0f);

    const profile::table& table = profile::this_thread();
    // Three records: the GEMM micro-kernel and the copies the convolutions
    // make inside are not public entry points, so not counted on their own.
    REQUIRE(table.records().size() == 3);
    const std::string geometry = "3x3 s2, 3 -> 4 channels, 6x6 input, batch 2";
    const profile::record* forward = find(table, "convolution forward", geometry);
    const profile::record* input_gradient = find(table, "convolution input gradient", geometry);
    const profile::record* weight_gradient = find(table, "convolution weight gradient", geometry);
    REQUIRE(forward != nullptr);
    REQUIRE(input_gradient != nullptr);
    REQUIRE(weight_gradient != nullptr);
    CHECK(forward->calls == 1);
    CHECK(forward->flops == double(shape.flops()));
    CHECK(forward->bytes ==
          double((shape.input_count() + shape.weight_count() + shape.output_count()) * sizeof(float)));
    CHECK(input_gradient->flops == double(shape.flops()));
    // beta = 1: the weight gradient is read as well as written.
    CHECK(weight_gradient->bytes ==
          double((shape.input_count() + shape.output_count() + 2 * shape.weight_count()) * sizeof(float)));
}

TEST_CASE("a profiled kernel running inside another is not counted twice")
{
    profile::this_thread().clear();
    std::vector<float> x(64, 1.0f), y(64, 1.0f);
    {
        const profile::scope outer("outer", "%zu", {1}, 7.0, 8.0);
        kernels::axpy(x.size(), 2.0f, x.data(), y.data());
    }
    const profile::table& table = profile::this_thread();
    REQUIRE(table.records().size() == 1);
    CHECK(std::string(table.records()[0].kind) == "outer");
    CHECK(table.records()[0].flops == 7.0);
    kernels::axpy(x.size(), 2.0f, x.data(), y.data()); // on its own again: counted
    CHECK(total_calls(table) == 2);
}

TEST_CASE("tables are per thread, merge record by record, and clear")
{
    profile::this_thread().clear();
    std::vector<float> x(32, 1.0f);
    kernels::scale(x.size(), 2.0f, x.data(), x.data());
    profile::table other;
    std::thread worker([&] {
        std::vector<float> z(32, 1.0f);
        kernels::scale(z.size(), 2.0f, z.data(), z.data());
        kernels::scale(z.size(), 2.0f, z.data(), z.data());
        other.add(profile::this_thread());
    });
    worker.join();
    CHECK(total_calls(profile::this_thread()) == 1); // the worker's calls went to its own table
    REQUIRE(other.records().size() == 1);
    CHECK(other.records()[0].calls == 2);
    other.add(profile::this_thread());
    REQUIRE(other.records().size() == 1);
    CHECK(other.records()[0].calls == 3);
    CHECK(other.records()[0].flops == 3.0 * 32);
    other.clear();
    CHECK(other.records().empty());
}
