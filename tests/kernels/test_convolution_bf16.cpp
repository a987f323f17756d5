// The bf16 convolutions (kernels/convolution_bf16.hpp) on every engine the
// CPU offers (AMX tiles, vdpbf16ps), the forward pass, the input gradient
// and the weight gradient, against the references over the rounded
// operands, held to float accumulation: the reference network's shapes and
// odd ones (channel counts off every pair, chunk and tile of channels,
// stride 2, no padding, 1x1 kernels), beta 0 (the result starts as NaN) and
// not; every pixel a tile or a vector reads within its buffers; for an
// engine the CPU lacks, the refusals that name its instruction.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include <doctest/doctest.h>

#include <petra/kernels/convolution_bf16.hpp>

#include "reference/convolution.hpp"
#include "support.hpp"

namespace {

using petra::kernels::bf16_engine;
using petra::kernels::convolution_shape;

std::vector<bf16_engine> offered_engines()
{
    std::vector<bf16_engine> engines;
    if (petra::kernels::bf16_support().avx512_bf16) engines.push_back(bf16_engine::avx512_bf16);
    if (petra::kernels::bf16_support().amx) engines.push_back(bf16_engine::amx);
    return engines;
}

double rounded(float value) { return petra::kernels::bf16_to_float(petra::kernels::round_to_bf16(value)); }

enum class pass { forward, input_gradient, weight_gradient };

// A pass's two operands and its result, in values, and the terms each
// result sums.
struct pass_sizes {
    std::size_t first, second, result;
    double terms;
};

pass_sizes sizes_of(pass p, const convolution_shape& s)
{
    switch (p) {
    case pass::forward: return {s.input_count(), s.weight_count(), s.output_count(), double(s.patch_size())};
    case pass::input_gradient:
        return {s.output_count(), s.weight_count(), s.input_count(), double(s.out_channels * s.kernel * s.kernel)};
    case pass::weight_gradient:
        return {s.input_count(), s.output_count(), s.weight_count(), double(s.batch * s.output_pixels())};
    }
    return {};
}

void run_bf16(bf16_engine engine, pass p, const convolution_shape& s, const float* first, const float* second,
              float* result, float beta)
{
    namespace kernels = petra::kernels;
    if (p == pass::forward) kernels::convolution_forward_bf16(s, first, second, result, beta, {}, {}, {}, engine);
    else if (p == pass::input_gradient) {
        kernels::convolution_backward_input_bf16(s, first, second, result, beta, {}, engine);
    } else {
        kernels::convolution_backward_weights_bf16(s, first, second, result, beta, {}, {}, engine);
    }
}

template <class T>
void run_reference(pass p, const convolution_shape& s, const T* first, const T* second, T* result)
{
    if (p == pass::forward) petra::reference::convolution_forward(s, first, second, result);
    else if (p == pass::input_gradient) petra::reference::convolution_backward_input(s, first, second, result, T(0));
    else petra::reference::convolution_backward_weights(s, first, second, result, T(0));
}

// Runs pass p in bf16 on every shape, with beta 0 (the result starting as
// NaN) and `beta`, against the references in double over the rounded
// operands: within float accumulation's bound of their sum (the sum of the
// products' magnitudes times the terms), which most float results of the
// unrounded operands fall outside of.
void check_pass(bf16_engine engine, pass p, std::initializer_list<convolution_shape> shapes, std::uint64_t seed,
                float beta)
{
    CAPTURE(petra::kernels::bf16_engine_name(engine));
    std::mt19937_64 generator(seed);
    std::size_t cases = 0, apart_from_float = 0;
    for (const convolution_shape& shape : shapes) {
        for (const float b : {0.0f, beta}) {
            CAPTURE(shape.in_channels);
            CAPTURE(shape.out_channels);
            CAPTURE(shape.in_height);
            CAPTURE(shape.in_width);
            CAPTURE(shape.kernel);
            CAPTURE(shape.stride);
            CAPTURE(shape.padding);
            CAPTURE(b);
            const pass_sizes sizes = sizes_of(p, shape);
            const auto first = petra::test::random_vector<float>(sizes.first, generator);
            const auto second = petra::test::random_vector<float>(sizes.second, generator);
            const auto start = b == 0.0f ? petra::test::nan_vector<float>(sizes.result)
                                         : petra::test::random_vector<float>(sizes.result, generator);
            auto actual = start;
            run_bf16(engine, p, shape, first.data(), second.data(), actual.data(), b);
            std::vector<double> x(first.size()), y(second.size()), x_abs(first.size()), y_abs(second.size());
            for (std::size_t i = 0; i < x.size(); ++i) x[i] = rounded(first[i]), x_abs[i] = std::fabs(x[i]);
            for (std::size_t i = 0; i < y.size(); ++i) y[i] = rounded(second[i]), y_abs[i] = std::fabs(y[i]);
            std::vector<double> sums(sizes.result), magnitudes(sizes.result);
            std::vector<float> in_float(sizes.result);
            run_reference(p, shape, x.data(), y.data(), sums.data());
            run_reference(p, shape, x_abs.data(), y_abs.data(), magnitudes.data());
            run_reference(p, shape, first.data(), second.data(), in_float.data());
            bool all_close = true;
            for (std::size_t i = 0; i < sums.size(); ++i) {
                const double previous = b == 0.0f ? 0.0 : double(b) * double(start[i]);
                const double expected = sums[i] + previous;
                const double tolerance = (sizes.terms + 8) * 0x1p-23 * (magnitudes[i] + std::fabs(previous)) + 1e-30;
                all_close = all_close && std::fabs(double(actual[i]) - expected) <= tolerance;
                if (std::fabs(double(in_float[i]) + previous - expected) > tolerance) ++apart_from_float;
            }
            CHECK(all_close);
            ++cases;
        }
    }
    CHECK(cases == 2 * shapes.size());
    CHECK(apart_from_float > 0);
}

// batch, in channels, height, width, out channels, kernel, stride, padding:
// the reference network's shapes and odd ones.
constexpr std::initializer_list<convolution_shape> every_kind = {
    {2, 16, 28, 28, 16, 3, 1, 1}, {2, 32, 14, 14, 32, 3, 1, 1}, {2, 64, 7, 7, 64, 3, 1, 1},
    {2, 16, 28, 28, 32, 3, 2, 1}, {2, 32, 14, 14, 64, 3, 2, 1}, {2, 16, 28, 28, 32, 1, 2, 0},
    {2, 1, 28, 28, 32, 3, 1, 1},  {3, 3, 9, 11, 5, 3, 1, 1},    {2, 5, 10, 7, 3, 3, 2, 1},
    {1, 40, 6, 5, 20, 3, 1, 1},   {2, 7, 8, 9, 33, 1, 1, 0},    {1, 2, 5, 4, 17, 3, 2, 0},
    {2, 33, 3, 3, 48, 3, 1, 2},
};

} // namespace

TEST_CASE("convolution_forward_bf16 sums the rounded input's and weights' products in float")
{
    if (offered_engines().empty()) MESSAGE("this CPU offers no bf16 engine: the refusals are tested below");
    for (const bf16_engine engine : offered_engines()) check_pass(engine, pass::forward, every_kind, 13, 1.5f);
}

TEST_CASE("convolution_backward_input_bf16 sums the rounded gradient's and weights' products in float")
{
    for (const bf16_engine engine : offered_engines()) {
        check_pass(engine, pass::input_gradient, every_kind, 19, -0.5f);
        // Stride 2 takes the dilated gradient a few images at a time: a shape
        // of several chunks.
        const convolution_shape chunked{9, 2, 30, 30, 64, 3, 2, 1};
        CHECK(petra::kernels::detail::dilated_chunk_images(chunked) < chunked.batch);
        check_pass(engine, pass::input_gradient, {chunked, {1, 5, 6, 7, 18, 3, 1, 0}}, 29, 2.0f);
    }
}

TEST_CASE("convolution_backward_weights_bf16 sums the rounded input's and gradient's products in float")
{
    for (const bf16_engine engine : offered_engines()) {
        check_pass(engine, pass::weight_gradient, every_kind, 23, 0.75f);
        // 48 and 80 input channels: three vectors of channels, and four then one.
        check_pass(engine, pass::weight_gradient, {{2, 48, 6, 7, 24, 3, 1, 1}, {1, 80, 5, 5, 12, 3, 2, 1}}, 31, 1.0f);
    }
}

TEST_CASE("an image's paired planes hold every pixel the tiles and vectors read")
{
    // The tiles read 32 wide pixels at a time from every tap's origin in
    // every pair, the vectors 16 from every multiple of 16 before the last
    // wide pixel: the last of them, for every shape of up to 12 x 12 pixels
    // and 40 channels, lies within the planes and their slack (which the
    // address sanitizer cannot watch: tile loads are not instrumented, and
    // the slack lies inside the scratch).
    namespace detail = petra::kernels::detail;
    std::size_t shapes = 0, overruns = 0;
    for (std::size_t kernel : {1, 3}) {
        for (std::size_t stride : {1, 2}) {
            for (std::size_t padding = 0; padding < kernel; ++padding) {
                for (std::size_t height = 1; height <= 12; ++height) {
                    for (std::size_t width = 1; width <= 12; ++width) {
                        for (std::size_t channels : {1, 2, 3, 16, 31, 32, 33, 40}) {
                            const convolution_shape shape{1, channels, height, width, 1, kernel, stride, padding};
                            if (height + 2 * padding < kernel || width + 2 * padding < kernel) continue;
                            const detail::bf16_convolution_geometry g(shape);
                            std::vector<std::size_t> origins(g.taps);
                            detail::bf16_tap_origins(shape, g, origins.data());
                            const std::size_t blocks = (g.wide_pixels + 31) / 32;
                            const std::size_t last = (g.chunks * g.chunk_pairs - 1) * g.pair_stride +
                                                     *std::max_element(origins.begin(), origins.end()) + blocks * 32 -
                                                     1;
                            if (last >= g.image_pairs) ++overruns;
                            const std::size_t last_vector = (g.chunks * g.chunk_pairs - 1) * g.pair_stride +
                                                            *std::max_element(origins.begin(), origins.end()) +
                                                            (g.wide_pixels - 1) / 16 * 16 + 15;
                            if (last_vector >= g.image_pairs) ++overruns;
                            // The weight gradient's: every tile of pixel pairs within its
                            // rows, and the words they are gathered from within the planes.
                            const detail::bf16_weight_gradient_geometry w(shape);
                            const std::size_t largest = *std::max_element(origins.begin(), origins.end());
                            if (largest / 2 + w.depth / 2 > w.pixel_pairs) ++overruns;
                            if (((channels + 1) / 2 - 1) * g.pair_stride + 2 * w.pixel_pairs > g.image_pairs) {
                                ++overruns;
                            }
                            ++shapes;
                        }
                    }
                }
            }
        }
    }
    CHECK(shapes > 3000);
    CHECK(overruns == 0);
}

TEST_CASE("the bf16 convolutions take their scratch from a caller's region of their demand's size")
{
    if (offered_engines().empty()) return;
    namespace kernels = petra::kernels;
    // A stride-2 shape of several chunks, so that the input gradient's
    // dilated buffer and its correlations share the region.
    const convolution_shape shape{9, 2, 30, 30, 64, 3, 2, 1};
    std::mt19937_64 generator(17);
    const auto input = petra::test::random_vector<float>(shape.input_count(), generator);
    const auto weights = petra::test::random_vector<float>(shape.weight_count(), generator);
    const auto grad_y = petra::test::random_vector<float>(shape.output_count(), generator);
    // Runs a kernel into a region of exactly its demand (64-byte aligned) and
    // on per-thread buffers: the same results; a region 64 bytes short throws.
    const auto same_in_region = [&](std::size_t bytes, std::size_t count, auto&& run) {
        std::vector<std::byte> storage(bytes + 64);
        std::byte* start = storage.data() + (64 - reinterpret_cast<std::uintptr_t>(storage.data()) % 64) % 64;
        std::vector<float> in_region(count), per_thread(count);
        run(in_region.data(), std::span<std::byte>(start, bytes));
        run(per_thread.data(), std::span<std::byte>());
        CHECK(in_region == per_thread);
        CHECK_THROWS_AS(run(in_region.data(), std::span<std::byte>(start, bytes - 64)), std::invalid_argument);
    };
    same_in_region(kernels::convolution_forward_bf16_scratch(shape).region_bytes(), shape.output_count(),
                   [&](float* out, std::span<std::byte> region) {
                       kernels::convolution_forward_bf16(shape, input.data(), weights.data(), out, 0.0f, region);
                   });
    same_in_region(kernels::convolution_backward_input_bf16_scratch(shape).region_bytes(), shape.input_count(),
                   [&](float* out, std::span<std::byte> region) {
                       kernels::convolution_backward_input_bf16(shape, grad_y.data(), weights.data(), out, 0.0f,
                                                                region);
                   });
    same_in_region(kernels::convolution_backward_weights_bf16_scratch(shape).region_bytes(), shape.weight_count(),
                   [&](float* out, std::span<std::byte> region) {
                       kernels::convolution_backward_weights_bf16(shape, input.data(), grad_y.data(), out, 0.0f,
                                                                  region);
                   });
}

TEST_CASE("the bf16 convolutions refuse an engine the CPU lacks, naming its instruction")
{
    namespace kernels = petra::kernels;
    const convolution_shape shape{1, 1, 3, 3, 1, 3, 1, 1};
    std::vector<float> input(9, 1.0f), weights(9, 1.0f), output(9);
    for (const bf16_engine engine : {bf16_engine::avx512_bf16, bf16_engine::amx}) {
        CAPTURE(kernels::bf16_engine_name(engine));
        const bool offered =
            engine == bf16_engine::amx ? kernels::bf16_support().amx : kernels::bf16_support().avx512_bf16;
        const char* instruction = engine == bf16_engine::amx ? "tdpbf16ps" : "vdpbf16ps";
        if (!offered) {
            CHECK_THROWS_WITH_AS(kernels::convolution_forward_bf16(shape, input.data(), weights.data(), output.data(),
                                                                   0.0f, {}, {}, {}, engine),
                                 doctest::Contains(instruction), std::invalid_argument);
            CHECK_THROWS_WITH_AS(kernels::convolution_backward_input_bf16(shape, output.data(), weights.data(),
                                                                          input.data(), 0.0f, {}, engine),
                                 doctest::Contains(instruction), std::invalid_argument);
            CHECK_THROWS_WITH_AS(kernels::convolution_backward_weights_bf16(shape, input.data(), output.data(),
                                                                            weights.data(), 0.0f, {}, {}, engine),
                                 doctest::Contains(instruction), std::invalid_argument);
        } else {
            kernels::convolution_forward_bf16(shape, input.data(), weights.data(), output.data(), 0.0f, {}, {}, {},
                                              engine);
            CHECK(output[4] == 9.0f); // the centre sees every tap
            CHECK(output[0] == 4.0f); // a corner, four
        }
    }
    // With neither engine, the default (best_bf16_engine) names both.
    if (offered_engines().empty()) {
        CHECK_THROWS_WITH_AS(kernels::convolution_forward_bf16(shape, input.data(), weights.data(), output.data()),
                             doctest::Contains("vdpbf16ps"), std::invalid_argument);
    }
    const convolution_shape bad{1, 1, 3, 3, 1, 5, 1, 1};
    CHECK_THROWS_AS(petra::kernels::convolution_forward_bf16(bad, input.data(), weights.data(), output.data()),
                    std::invalid_argument);
}

TEST_CASE("with an input map, the bf16 forward and weight gradient give their numbers on the mapped input, to the bit")
{
    namespace kernels = petra::kernels;
    std::mt19937_64 generator(37);
    // Any shape: an odd channel count (a pair's odd half empty), stride 2,
    // a 1x1 kernel, and the reference network's 16 channels at 28x28.
    for (const bf16_engine engine : offered_engines())
        for (const convolution_shape& shape :
             {convolution_shape{2, 16, 28, 28, 16, 3, 1, 1}, convolution_shape{3, 5, 9, 11, 7, 3, 1, 1},
              convolution_shape{2, 5, 10, 7, 3, 3, 2, 1}, convolution_shape{2, 7, 8, 9, 33, 1, 1, 0}}) {
            CAPTURE(shape.in_channels);
            CAPTURE(shape.stride);
            const auto x = petra::test::random_vector<float>(shape.input_count(), generator);
            const auto weights = petra::test::random_vector<float>(shape.weight_count(), generator);
            const auto grad_y = petra::test::random_vector<float>(shape.output_count(), generator);
            const auto scale = petra::test::random_vector<float>(shape.in_channels, generator, -1.5f, 1.5f);
            const auto shift = petra::test::random_vector<float>(shape.in_channels, generator, -0.5f, 0.5f);
            const kernels::affine_relu_map<float> map{scale.data(), shift.data()};
            std::vector<float> mapped(x.size());
            for (std::size_t i = 0; i < x.size(); ++i)
                mapped[i] = map(i / shape.input_pixels() % shape.in_channels, x[i]);
            CHECK(std::count(mapped.begin(), mapped.end(), 0.0f) > 0);

            auto expected = petra::test::nan_vector<float>(shape.output_count()), actual = expected;
            CAPTURE(kernels::bf16_engine_name(engine));
            kernels::convolution_forward_bf16(shape, mapped.data(), weights.data(), expected.data(), 0.0f, {}, {}, {},
                                              engine);
            kernels::convolution_forward_bf16(shape, x.data(), weights.data(), actual.data(), 0.0f, {}, map, {},
                                              engine);
            CHECK(actual == expected);

            auto expected_weights = petra::test::random_vector<float>(shape.weight_count(), generator),
                 actual_weights = expected_weights;
            kernels::convolution_backward_weights_bf16(shape, mapped.data(), grad_y.data(), expected_weights.data(),
                                                       1.0f, {}, {}, engine);
            kernels::convolution_backward_weights_bf16(shape, x.data(), grad_y.data(), actual_weights.data(), 1.0f, {},
                                                       map, engine);
            CHECK(actual_weights == expected_weights);
        }
}

TEST_CASE("the bf16 forward gives its output's batch statistics with channel_mean_variance's bits")
{
    namespace kernels = petra::kernels;
    std::mt19937_64 generator(43);
    // Up to 32 output channels the statistics are taken a group of images at
    // a time (24 images of 28x28 x 32 channels, 2.4 MB, are more than one
    // group where L2 is under 4 MiB);
    // beyond, over the whole output.
    for (const bf16_engine engine : offered_engines()) {
        for (const convolution_shape& shape :
             {convolution_shape{24, 16, 28, 28, 32, 3, 1, 1}, convolution_shape{3, 5, 9, 11, 7, 3, 2, 1},
              convolution_shape{2, 6, 6, 5, 40, 3, 1, 1}}) {
            CAPTURE(kernels::bf16_engine_name(engine));
            CAPTURE(shape.out_channels);
            const auto x = petra::test::random_vector<float>(shape.input_count(), generator);
            const auto weights = petra::test::random_vector<float>(shape.weight_count(), generator);
            auto plain = petra::test::nan_vector<float>(shape.output_count()), with_statistics = plain;
            kernels::convolution_forward_bf16(shape, x.data(), weights.data(), plain.data(), 0.0f, {}, {}, {}, engine);
            std::vector<float> mean(shape.out_channels), variance(shape.out_channels);
            kernels::convolution_forward_bf16(shape, x.data(), weights.data(), with_statistics.data(), 0.0f, {}, {},
                                              {mean.data(), variance.data()}, engine);
            CHECK(with_statistics == plain);
            std::vector<float> expected_mean(shape.out_channels), expected_variance(shape.out_channels);
            kernels::channel_mean_variance(shape.batch, shape.out_channels, shape.output_pixels(), plain.data(),
                                           expected_mean.data(), expected_variance.data());
            CHECK(mean == expected_mean);
            CHECK(variance == expected_variance);
        }
    }
}
