// Convolution forward and both gradients against their scalar references, for
// kernel 1x1 and 3x3, stride 1 and 2, with and without padding, on shapes that
// are not multiples of the vector width or of the GEMM tiles.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <stdexcept>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include <petra/kernels/convolution.hpp>
#include <petra/kernels/input_map.hpp>
#include <petra/kernels/reduction.hpp>

#include "reference/convolution.hpp"
#include "support.hpp"

namespace {

using petra::kernels::convolution_shape;

struct image_size {
    std::size_t batch, in_channels, height, width, out_channels;
};

// {3, 2, 28, 28, 3} and {7, 2, 14, 14, 5} have more images than one chunk of
// the direct weight gradient holds (it groups about a thousand output
// pixels), so chunk boundaries are crossed.
// Those with at least 8 channels on both sides take Winograd's form for 3x3,
// stride 1, padding 1 (kernels/winograd.hpp) where the input channels fill
// more than half of their vectors (8 do not on AVX-512: the direct form
// there): odd and even image sides, and channel counts that are not whole
// vectors; {9, 8, 7, 9, 12} and {9, 9, 7, 9, 12} have more images than one
// group of the form holds, the last group partial.
constexpr image_size sizes[] = {
    {1, 1, 1, 1, 1},  {1, 1, 5, 5, 1},     {2, 3, 7, 9, 5},    {3, 4, 8, 8, 8},   {1, 5, 13, 6, 17},
    {2, 7, 9, 33, 9}, {2, 16, 14, 14, 16}, {1, 3, 28, 28, 33}, {3, 2, 28, 28, 3}, {7, 2, 14, 14, 5},
    {2, 9, 7, 5, 12}, {9, 8, 7, 9, 12},    {1, 20, 1, 2, 8},   {3, 33, 6, 6, 17}, {9, 9, 7, 9, 12},
};

// Every supported kernel/stride/padding combination applied to every size
// whose padded input can hold the kernel.
template <class Check>
void for_each_shape(Check&& check)
{
    for (const image_size& size : sizes)
        for (std::size_t kernel : {1, 3})
            for (std::size_t stride : {1, 2})
                for (std::size_t padding = 0; padding < kernel; ++padding) {
                    const convolution_shape shape{size.batch,        size.in_channels, size.height, size.width,
                                                  size.out_channels, kernel,           stride,      padding};
                    if (size.height + 2 * padding < kernel || size.width + 2 * padding < kernel) continue;
                    INFO("batch " << shape.batch << ", channels " << shape.in_channels << " -> " << shape.out_channels
                                  << ", input " << shape.in_height << "x" << shape.in_width << ", kernel " << kernel
                                  << ", stride " << stride << ", padding " << padding);
                    check(shape);
                }
}

// The weight gradient of random inputs against the reference, with beta 0
// (the result's prior values NaN, never read) and 1 (accumulated).
template <class T>
void check_weight_gradient(const convolution_shape& shape, std::mt19937_64& generator)
{
    const auto input = petra::test::random_vector<T>(shape.input_count(), generator);
    const auto grad_y = petra::test::random_vector<T>(shape.output_count(), generator);
    const std::size_t terms = shape.batch * shape.output_pixels();
    for (T beta : {T(0), T(1)}) {
        auto expected = beta == T(0) ? petra::test::nan_vector<T>(shape.weight_count())
                                     : petra::test::random_vector<T>(shape.weight_count(), generator);
        auto actual = expected;
        petra::reference::convolution_backward_weights(shape, input.data(), grad_y.data(), expected.data(), beta);
        petra::kernels::convolution_backward_weights(shape, input.data(), grad_y.data(), actual.data(), beta);
        petra::test::check_close(actual, expected, petra::test::accumulation_tolerance<T>(terms + 1));
    }
}

} // namespace

TEST_CASE_TEMPLATE("convolution forward matches the reference", T, float, double)
{
    std::mt19937_64 generator(1);
    for_each_shape([&](const convolution_shape& shape) {
        const auto input = petra::test::random_vector<T>(shape.input_count(), generator);
        const auto weights = petra::test::random_vector<T>(shape.weight_count(), generator);
        auto expected = petra::test::nan_vector<T>(shape.output_count());
        auto actual = petra::test::nan_vector<T>(shape.output_count());
        petra::reference::convolution_forward(shape, input.data(), weights.data(), expected.data());
        petra::kernels::convolution_forward(shape, input.data(), weights.data(), actual.data());
        petra::test::check_close(actual, expected, petra::test::accumulation_tolerance<T>(shape.patch_size()));
    });
}

TEST_CASE_TEMPLATE("convolution input gradient matches the reference", T, float, double)
{
    std::mt19937_64 generator(2);
    for_each_shape([&](const convolution_shape& shape) {
        const auto grad_y = petra::test::random_vector<T>(shape.output_count(), generator);
        const auto weights = petra::test::random_vector<T>(shape.weight_count(), generator);
        const std::size_t terms = shape.out_channels * shape.kernel * shape.kernel;
        for (T beta : {T(0), T(1), T(-0.5)}) {
            auto expected = beta == T(0) ? petra::test::nan_vector<T>(shape.input_count())
                                         : petra::test::random_vector<T>(shape.input_count(), generator);
            auto actual = expected;
            petra::reference::convolution_backward_input(shape, grad_y.data(), weights.data(), expected.data(), beta);
            petra::kernels::convolution_backward_input(shape, grad_y.data(), weights.data(), actual.data(), beta);
            petra::test::check_close(actual, expected, petra::test::accumulation_tolerance<T>(terms + 1));
        }
    });
}

TEST_CASE_TEMPLATE("Winograd's form and the direct correlation agree on all three kernels, with and without "
                   "accumulation",
                   T, float, double)
{
    using namespace petra::kernels;
    std::mt19937_64 generator(5);
    for (const convolution_shape shape :
         {convolution_shape{3, 16, 28, 28, 16, 3, 1, 1}, convolution_shape{5, 32, 14, 14, 32, 3, 1, 1},
          convolution_shape{4, 64, 7, 7, 64, 3, 1, 1}, convolution_shape{2, 12, 9, 4, 40, 3, 1, 1},
          convolution_shape{2, 72, 5, 5, 9, 3, 1, 1}}) {
        REQUIRE(detail::winograd_applies(shape));
        INFO("batch " << shape.batch << ", channels " << shape.in_channels << " -> " << shape.out_channels << ", input "
                      << shape.in_height << "x" << shape.in_width);
        const auto input = petra::test::random_vector<T>(shape.input_count(), generator);
        const auto weights = petra::test::random_vector<T>(shape.weight_count(), generator);
        const auto grad_y = petra::test::random_vector<T>(shape.output_count(), generator);
        scratch_source scratch;
        for (T beta : {T(0), T(0.75)}) {
            auto direct = beta == T(0) ? petra::test::nan_vector<T>(shape.output_count())
                                       : petra::test::random_vector<T>(shape.output_count(), generator);
            auto winograd = direct;
            detail::forward_accumulate(shape, input.data(), weights.data(), direct.data(), beta, scratch);
            detail::winograd_forward(shape, input.data(), weights.data(), winograd.data(), beta, scratch);
            petra::test::check_close(winograd, direct, petra::test::accumulation_tolerance<T>(shape.patch_size() + 1));

            auto direct_input = beta == T(0) ? petra::test::nan_vector<T>(shape.input_count())
                                             : petra::test::random_vector<T>(shape.input_count(), generator);
            auto winograd_input = direct_input;
            detail::backward_input_by_phases(shape, grad_y.data(), weights.data(), direct_input.data(), beta, scratch);
            detail::winograd_backward_input(shape, grad_y.data(), weights.data(), winograd_input.data(), beta, scratch);
            petra::test::check_close(winograd_input, direct_input,
                                     petra::test::accumulation_tolerance<T>(shape.out_channels * 9 + 1));
        }
        // The weight gradient adds to grad_weights (convolution_backward_weights
        // scales it by beta first), in both tiles (odd sides: tiles past the
        // edge).
        const auto initial_weights = petra::test::random_vector<T>(shape.weight_count(), generator);
        auto direct_weights = initial_weights;
        detail::weight_gradient(shape, input.data(), grad_y.data(), direct_weights.data(), scratch);
        for (const std::size_t tile : {2, 4}) {
            INFO("F(" << tile << "x" << tile << ", 3x3) weight gradient");
            auto winograd_weights = initial_weights;
            detail::winograd_weight_gradient(detail::forward_winograd_geometry<T>(shape, tile), input.data(),
                                             grad_y.data(), winograd_weights.data(), scratch);
            petra::test::check_close(winograd_weights, direct_weights,
                                     petra::test::accumulation_tolerance<T>(shape.batch * shape.output_pixels() + 1));
        }
    }
    // Narrow channels and other geometries stay direct: 8 input channels
    // where they fill half a vector of floats (AVX-512), not 9 (of 16 lanes).
    CHECK(detail::winograd_applies({64, 8, 28, 28, 8, 3, 1, 1}) == (simd_width<float> < 16));
    CHECK(detail::winograd_applies({64, 9, 28, 28, 8, 3, 1, 1}));
    CHECK_FALSE(detail::winograd_applies({64, 1, 28, 28, 16, 3, 1, 1}));
    CHECK_FALSE(detail::winograd_applies({64, 16, 28, 28, 32, 3, 2, 1}));
    CHECK_FALSE(detail::winograd_applies({64, 16, 28, 28, 16, 3, 1, 0}));
    CHECK_FALSE(detail::winograd_applies({64, 32, 14, 14, 64, 1, 1, 0}));
}

TEST_CASE_TEMPLATE("Winograd's two tiles agree with the direct correlation, tiles past the edge included", T, float,
                   double)
{
    using namespace petra::kernels;
    std::mt19937_64 generator(6);
    // Sides that are and are not multiples of 2 and 4, channels that are and
    // are not whole vectors, and more images than one group holds.
    for (const convolution_shape shape :
         {convolution_shape{2, 16, 28, 28, 16, 3, 1, 1}, convolution_shape{3, 9, 9, 5, 12, 3, 1, 1},
          convolution_shape{2, 32, 14, 14, 32, 3, 1, 1}, convolution_shape{5, 64, 7, 7, 64, 3, 1, 1},
          convolution_shape{40, 9, 6, 10, 20, 3, 1, 1}, convolution_shape{2, 9, 1, 3, 8, 3, 1, 1}}) {
        REQUIRE(detail::winograd_applies(shape));
        const auto input = petra::test::random_vector<T>(shape.input_count(), generator);
        const auto weights = petra::test::random_vector<T>(shape.weight_count(), generator);
        const auto grad_y = petra::test::random_vector<T>(shape.output_count(), generator);
        const std::size_t in_channels = shape.in_channels;
        const auto tap = [&](std::size_t co, std::size_t ci, std::size_t kh, std::size_t kw) {
            return weights[((co * in_channels + ci) * 3 + kh) * 3 + kw];
        };
        const auto flipped = [&](std::size_t ci, std::size_t co, std::size_t kh, std::size_t kw) {
            return weights[((co * in_channels + ci) * 3 + 2 - kh) * 3 + 2 - kw];
        };
        scratch_source scratch;
        for (const std::size_t tile : {2, 4}) {
            INFO("F(" << tile << "x" << tile << ", 3x3), batch " << shape.batch << ", channels " << shape.in_channels
                      << " -> " << shape.out_channels << ", input " << shape.in_height << "x" << shape.in_width);
            for (T beta : {T(0), T(0.75)}) {
                auto direct = beta == T(0) ? petra::test::nan_vector<T>(shape.output_count())
                                           : petra::test::random_vector<T>(shape.output_count(), generator);
                auto winograd = direct;
                detail::forward_accumulate(shape, input.data(), weights.data(), direct.data(), beta, scratch);
                detail::winograd_correlation(detail::forward_winograd_geometry<T>(shape, tile), input.data(), tap,
                                             winograd.data(), beta, scratch);
                petra::test::check_close(winograd, direct,
                                         petra::test::accumulation_tolerance<T>(shape.patch_size() + 1));

                auto direct_input = beta == T(0) ? petra::test::nan_vector<T>(shape.input_count())
                                                 : petra::test::random_vector<T>(shape.input_count(), generator);
                auto winograd_input = direct_input;
                detail::backward_input_by_phases(shape, grad_y.data(), weights.data(), direct_input.data(), beta,
                                                 scratch);
                detail::winograd_correlation(detail::input_gradient_winograd_geometry<T>(shape, tile), grad_y.data(),
                                             flipped, winograd_input.data(), beta, scratch);
                petra::test::check_close(winograd_input, direct_input,
                                         petra::test::accumulation_tolerance<T>(shape.out_channels * 9 + 1));
            }
        }
    }
    // The larger tile where it takes fewer products: every side the
    // reference network has, not the smallest images.
    CHECK(detail::winograd_output_tile({64, 16, 28, 28, 16, 3, 1, 1}) == 4);
    CHECK(detail::winograd_output_tile({64, 32, 14, 14, 32, 3, 1, 1}) == 4);
    CHECK(detail::winograd_output_tile({64, 64, 7, 7, 64, 3, 1, 1}) == 4);
    CHECK(detail::winograd_output_tile({64, 64, 5, 5, 64, 3, 1, 1}) == 2);
    CHECK(detail::winograd_output_tile({64, 64, 2, 2, 64, 3, 1, 1}) == 2);
}

// The batch statistics a forward gives (convolution_forward's
// output_statistics) against channel_mean_variance of the output it wrote:
// the same bits in the direct form, which calls it; within a few units of
// rounding of the variance in Winograd's form, which gathers them image by
// image (winograd.hpp, result_statistics), for both tiles, more images than
// one group holds, channels that are not whole vectors, and outputs whose
// mean is large against their spread (inputs of 100 +- 1, where a sum of
// squares less the squared mean would lose the variance's digits).
TEST_CASE_TEMPLATE("a forward's output statistics are channel_mean_variance's of its output", T, float, double)
{
    using namespace petra::kernels;
    std::mt19937_64 generator(8);
    const auto check_statistics = [](const convolution_shape& shape, const std::vector<T>& output,
                                     const std::vector<T>& mean, const std::vector<T>& variance, bool same_bits) {
        const std::size_t pixels = shape.out_height() * shape.out_width();
        std::vector<T> expected_mean(shape.out_channels), expected_variance(shape.out_channels);
        channel_mean_variance(shape.batch, shape.out_channels, pixels, output.data(), expected_mean.data(),
                              expected_variance.data());
        for (std::size_t c = 0; c < shape.out_channels; ++c) {
            INFO("channel " << c << ": mean " << mean[c] << " against " << expected_mean[c] << ", variance "
                            << variance[c] << " against " << expected_variance[c]);
            if (same_bits) {
                CHECK(mean[c] == expected_mean[c]);
                CHECK(variance[c] == expected_variance[c]);
                continue;
            }
            const T spread = std::sqrt(expected_variance[c]);
            const T tolerance = petra::test::accumulation_tolerance<T>(64);
            CHECK(std::abs(mean[c] - expected_mean[c]) <= tolerance * (std::abs(expected_mean[c]) + spread));
            CHECK(std::abs(variance[c] - expected_variance[c]) <= tolerance * expected_variance[c]);
        }
    };
    for_each_shape([&](const convolution_shape& shape) {
        if (shape.batch * shape.out_height() * shape.out_width() < 2) return;
        const auto input = petra::test::random_vector<T>(shape.input_count(), generator);
        const auto weights = petra::test::random_vector<T>(shape.weight_count(), generator);
        auto output = petra::test::nan_vector<T>(shape.output_count());
        std::vector<T> mean(shape.out_channels), variance(shape.out_channels);
        convolution_forward(shape, input.data(), weights.data(), output.data(), {}, {},
                            channel_statistics<T>{mean.data(), variance.data()});
        check_statistics(shape, output, mean, variance, !detail::winograd_applies(shape));
    });
    // The direct form over several of channel_mean_variance's groups of
    // images (forward_with_statistics computes a group's output, then adds
    // it): a stem's shape, a downsampling's, 32 channels (the most it takes)
    // and 33 (forward, then channel_mean_variance), each image's output at
    // least a fifth of half a 2 MiB L2, so that even there a group holds at
    // most five of the images; 13 and 11 of them, so that where a group
    // holds two to five (a 42x42 output of 32 float channels on a 1 MiB L2:
    // two) the last is shorter.
    for (const convolution_shape shape :
         {convolution_shape{13, 1, 42, 42, 32, 3, 1, 1}, convolution_shape{11, 16, 112, 112, 32, 3, 2, 1},
          convolution_shape{13, 8, 84, 84, 32, 1, 2, 0}, convolution_shape{11, 2, 56, 56, 33, 3, 1, 1}}) {
        REQUIRE(!detail::winograd_applies(shape));
        CAPTURE(shape.kernel);
        CAPTURE(shape.out_channels);
        const std::size_t pixels = shape.output_pixels();
        REQUIRE(shape.out_channels * pixels * sizeof(T) * 5 >= (std::size_t(2) << 20) / 2);
        CHECK(detail::mean_variance_groups<T>(shape.batch, shape.out_channels, pixels, 0,
                                              std::min(shape.out_channels, detail::channel_chunk),
                                              detail::mean_variance_group_bytes())
                  .group() < shape.batch);
        const auto input = petra::test::random_vector<T>(shape.input_count(), generator);
        const auto weights = petra::test::random_vector<T>(shape.weight_count(), generator);
        auto output = petra::test::nan_vector<T>(shape.output_count());
        auto plain = petra::test::nan_vector<T>(shape.output_count());
        std::vector<T> mean(shape.out_channels), variance(shape.out_channels);
        convolution_forward(shape, input.data(), weights.data(), output.data(), {}, {},
                            channel_statistics<T>{mean.data(), variance.data()});
        convolution_forward(shape, input.data(), weights.data(), plain.data());
        CHECK(std::equal(output.begin(), output.end(), plain.begin()));
        check_statistics(shape, output, mean, variance, true);
    }
    for (const convolution_shape shape :
         {convolution_shape{3, 16, 28, 28, 16, 3, 1, 1}, convolution_shape{40, 9, 6, 10, 20, 3, 1, 1},
          convolution_shape{5, 64, 7, 7, 64, 3, 1, 1}, convolution_shape{2, 9, 1, 3, 8, 3, 1, 1}}) {
        REQUIRE(detail::winograd_applies(shape));
        auto input = petra::test::random_vector<T>(shape.input_count(), generator);
        for (T& value : input) value += T(100);
        const auto weights = petra::test::random_vector<T>(shape.weight_count(), generator);
        const std::size_t in_channels = shape.in_channels;
        const auto tap = [&](std::size_t co, std::size_t ci, std::size_t kh, std::size_t kw) {
            return weights[((co * in_channels + ci) * 3 + kh) * 3 + kw];
        };
        scratch_source scratch;
        for (const std::size_t tile : {2, 4}) {
            INFO("F(" << tile << "x" << tile << ", 3x3), batch " << shape.batch << ", channels " << shape.in_channels
                      << " -> " << shape.out_channels << ", input " << shape.in_height << "x" << shape.in_width);
            auto output = petra::test::nan_vector<T>(shape.output_count());
            std::vector<T> mean(shape.out_channels), variance(shape.out_channels);
            detail::winograd_correlation(detail::forward_winograd_geometry<T>(shape, tile), input.data(), tap,
                                         output.data(), T(0), scratch, {},
                                         channel_statistics<T>{mean.data(), variance.data()});
            check_statistics(shape, output, mean, variance, false);
            // Not of a result accumulated onto what was there.
            CHECK_THROWS_WITH_AS(detail::winograd_correlation(detail::forward_winograd_geometry<T>(shape, tile),
                                                              input.data(), tap, output.data(), T(0.5), scratch, {},
                                                              channel_statistics<T>{mean.data(), variance.data()}),
                                 doctest::Contains("does not give the result's statistics"), std::invalid_argument);
        }
    }
}

// The direct kernels take a batch a chunk of images at a time (chunk_images
// in convolution.hpp), as many as keep their buffers within a budget of at
// most winograd_max_group_bytes. Shapes that need over 400 KB per image, more
// than a third of the largest budget, are computed in two or three chunks of
// their three images on every core: the phased input of 40 channels at
// 50 x 50 (forward and weight gradient) and the copy of an output gradient of
// 40 or 160 channels (input gradient), each against the reference. One
// result channel, or one source channel, keeps the references cheap.
TEST_CASE_TEMPLATE("the direct kernels agree with the reference across chunks of images", T, float, double)
{
    std::mt19937_64 generator(12);
    for (const convolution_shape& shape :
         {convolution_shape{3, 40, 50, 50, 1, 3, 2, 1}, convolution_shape{3, 40, 50, 49, 1, 3, 1, 0},
          convolution_shape{3, 1, 50, 50, 160, 3, 2, 1}, convolution_shape{3, 1, 49, 51, 40, 3, 1, 1}}) {
        INFO("channels " << shape.in_channels << " -> " << shape.out_channels << ", input " << shape.in_height << "x"
                         << shape.in_width << ", stride " << shape.stride << ", padding " << shape.padding);
        namespace detail = petra::kernels::detail;
        if (shape.in_channels > 1) {
            CHECK(detail::forward_chunk_images<T>(shape) < shape.batch);
            CHECK(detail::weight_gradient_chunk_images<T>(shape) < shape.batch);
        } else {
            CHECK(detail::input_gradient_chunk_images<T>(shape) < shape.batch);
        }
        const auto input = petra::test::random_vector<T>(shape.input_count(), generator);
        const auto weights = petra::test::random_vector<T>(shape.weight_count(), generator);
        const auto grad_y = petra::test::random_vector<T>(shape.output_count(), generator);
        auto expected = petra::test::nan_vector<T>(shape.output_count()), actual = expected;
        petra::reference::convolution_forward(shape, input.data(), weights.data(), expected.data());
        petra::kernels::convolution_forward(shape, input.data(), weights.data(), actual.data());
        petra::test::check_close(actual, expected, petra::test::accumulation_tolerance<T>(shape.patch_size()));
        auto expected_input = petra::test::random_vector<T>(shape.input_count(), generator),
             actual_input = expected_input;
        petra::reference::convolution_backward_input(shape, grad_y.data(), weights.data(), expected_input.data(), T(1));
        petra::kernels::convolution_backward_input(shape, grad_y.data(), weights.data(), actual_input.data(), T(1));
        petra::test::check_close(actual_input, expected_input,
                                 petra::test::accumulation_tolerance<T>(shape.out_channels * 9 + 1));
        check_weight_gradient<T>(shape, generator);
    }
}

TEST_CASE_TEMPLATE("convolution weight gradient matches the reference", T, float, double)
{
    std::mt19937_64 generator(3);
    for_each_shape([&](const convolution_shape& shape) { check_weight_gradient<T>(shape, generator); });
}

// A stem's weight gradient (3x3 over one channel) takes the dot products
// along the pixels on AVX-512, images in groups of half of L2: 12 images of
// 30 channels make 5 per group with 1 MiB of L2 and 10 with 2 MiB, so the
// groups, the last one partial, and a partial block of channels are crossed.
// (One shape, not every stride and padding: the general sizes above cover
// those, and among them this size doubled the test's time.)
TEST_CASE_TEMPLATE("a stem's weight gradient matches the reference across groups of images", T, float, double)
{
    std::mt19937_64 generator(4);
    check_weight_gradient<T>({12, 1, 28, 28, 30, 3, 1, 1}, generator);
}

// A 1x1 stride-2 weight gradient reads its input in place where its rows
// need no padding pixels (AVX-512, float; double takes the phased copy on
// the same shapes): the reference network's two downsampling shapes, the
// first with more images than one chunk holds on 1 or 2 MiB of L2, the
// second with an odd height, and an odd height and width, whose last value
// read is the input's last.
TEST_CASE_TEMPLATE("a 1x1 stride-2 weight gradient read in place matches the reference", T, float, double)
{
    std::mt19937_64 generator(5);
    for (const convolution_shape& shape :
         {convolution_shape{45, 16, 28, 28, 32, 1, 2, 0}, convolution_shape{5, 32, 13, 14, 64, 1, 2, 0},
          convolution_shape{3, 8, 13, 13, 64, 1, 2, 0}}) {
        CAPTURE(shape.in_channels);
        CHECK(petra::kernels::detail::weight_gradient_reads_in_place<T>(shape) ==
              petra::kernels::detail::can_read_input_in_place<T>);
        check_weight_gradient<T>(shape, generator);
    }
}

// A 1x1 stride-2 convolution is a 1x1 stride-1 convolution of its input's
// even pixels: its matrix products image by image (pointwise.hpp) sum in the
// direct form's order and arithmetic, so forward and input gradient equal,
// bit for bit, the stride-1 kernel on the even pixels gathered here (the
// input gradient spread back with zeros between). With beta != 0 the two
// kernels add beta * the prior value through different stores (whole or
// masked vectors), so there they agree to rounding. Widths up to 16
// (two rows to a vector), up to 32 (one) and wider (row by row), odd and
// even sides, pixels that fill no whole vector and a tail of one; the input
// gradient's pairs of rows of one to four vectors (widths 7, 14, 20, 28, 32).
TEST_CASE_TEMPLATE("a 1x1 stride-2 convolution equals the stride-1 one on its even pixels", T, float, double)
{
    using namespace petra::kernels;
    std::mt19937_64 generator(6);
    for (const convolution_shape& shape :
         {convolution_shape{3, 16, 28, 28, 32, 1, 2, 0}, convolution_shape{2, 32, 14, 14, 64, 1, 2, 0},
          convolution_shape{2, 3, 13, 13, 5, 1, 2, 0}, convolution_shape{2, 9, 31, 7, 17, 1, 2, 0},
          convolution_shape{2, 4, 5, 33, 3, 1, 2, 0}, convolution_shape{1, 2, 1, 1, 9, 1, 2, 0},
          convolution_shape{2, 5, 6, 64, 11, 1, 2, 0}, convolution_shape{2, 6, 9, 20, 7, 1, 2, 0},
          convolution_shape{2, 4, 7, 32, 5, 1, 2, 0}}) {
        REQUIRE(detail::uses_pointwise_products(shape));
        CAPTURE(shape.in_height);
        CAPTURE(shape.in_width);
        const convolution_shape even{
            shape.batch, shape.in_channels, shape.out_height(), shape.out_width(), shape.out_channels, 1, 1, 0};
        REQUIRE(!detail::uses_pointwise_products(even));
        const auto input = petra::test::random_vector<T>(shape.input_count(), generator);
        const auto weights = petra::test::random_vector<T>(shape.weight_count(), generator);
        const auto grad_y = petra::test::random_vector<T>(shape.output_count(), generator);
        // The even pixels of the input, and the input gradient's positions
        // they take.
        std::vector<std::size_t> even_pixels;
        for (std::size_t plane = 0; plane < shape.batch * shape.in_channels; ++plane)
            for (std::size_t y = 0; y < shape.in_height; y += 2)
                for (std::size_t x = 0; x < shape.in_width; x += 2)
                    even_pixels.push_back((plane * shape.in_height + y) * shape.in_width + x);
        std::vector<T> gathered(even.input_count());
        for (std::size_t i = 0; i < even_pixels.size(); ++i) gathered[i] = input[even_pixels[i]];
        for (T beta : {T(0), T(-0.5)}) {
            CAPTURE(beta);
            auto forward = beta == T(0) ? petra::test::nan_vector<T>(shape.output_count())
                                        : petra::test::random_vector<T>(shape.output_count(), generator);
            auto expected_forward = forward;
            scratch_source scratch;
            detail::forward_accumulate(shape, input.data(), weights.data(), forward.data(), beta, scratch);
            detail::forward_accumulate(even, gathered.data(), weights.data(), expected_forward.data(), beta, scratch);
            if (beta == T(0)) {
                CHECK(std::equal(forward.begin(), forward.end(), expected_forward.begin()));
            } else {
                petra::test::check_close(forward, expected_forward,
                                         petra::test::accumulation_tolerance<T>(shape.in_channels + 1));
            }

            const auto prior = petra::test::random_vector<T>(shape.input_count(), generator);
            auto gradient = beta == T(0) ? petra::test::nan_vector<T>(shape.input_count()) : prior;
            convolution_backward_input(shape, grad_y.data(), weights.data(), gradient.data(), beta);
            std::vector<T> even_gradient(even.input_count());
            for (std::size_t i = 0; i < even_pixels.size(); ++i) even_gradient[i] = prior[even_pixels[i]];
            convolution_backward_input(even, grad_y.data(), weights.data(), even_gradient.data(), beta);
            std::vector<T> expected_gradient(shape.input_count());
            for (std::size_t i = 0; i < expected_gradient.size(); ++i) expected_gradient[i] = beta * prior[i];
            if (beta == T(0)) std::fill(expected_gradient.begin(), expected_gradient.end(), T(0));
            for (std::size_t i = 0; i < even_pixels.size(); ++i) expected_gradient[even_pixels[i]] = even_gradient[i];
            if (beta == T(0)) {
                CHECK(std::equal(gradient.begin(), gradient.end(), expected_gradient.begin()));
            } else {
                petra::test::check_close(gradient, expected_gradient,
                                         petra::test::accumulation_tolerance<T>(shape.out_channels + 1));
            }
        }
    }
}

#if defined(__AVX512F__)
// The forward of a 3x3 stride-2 convolution as patch products (pointwise.hpp)
// against the direct correlation it replaces for rows of at most two vectors:
// bit for bit with beta 0 (the same products in the same order), to rounding
// with beta != 0 (each applies beta in its own stores); and the input
// gradient (padding 1, even widths) against the direct form's paired
// phases, bit for bit. Widths 1 to 32 (rows of one and two vectors; with
// padding 2 a 31 or 32 wide row's 16 or 17 outputs), odd and even sides,
// paddings 0 to 2, channel counts that are and are not multiples of the
// tile's 8 rows.
TEST_CASE("a 3x3 stride-2 convolution as patch products equals the direct correlation")
{
    using namespace petra::kernels;
    std::mt19937_64 generator(13);
    std::size_t shapes = 0, gradient_shapes = 0;
    for (const std::size_t width : {1, 2, 3, 7, 8, 13, 14, 16, 17, 28, 31, 32})
        for (const std::size_t height : {1, 4, 14})
            for (const std::size_t padding : {0, 1, 2})
                for (const auto& channels : {std::pair<std::size_t, std::size_t>{1, 1}, {3, 8}, {17, 33}}) {
                    const std::size_t in_channels = channels.first, out_channels = channels.second;
                    // 11 images: the input gradient's groups of 8 and a partial one.
                    const std::size_t batch = in_channels == 3 ? 11 : 3;
                    const convolution_shape shape{batch, in_channels, height, width, out_channels, 3, 2, padding};
                    if (height + 2 * padding < 3 || width + 2 * padding < 3) continue;
                    INFO("channels " << in_channels << " -> " << out_channels << ", input " << height << "x" << width
                                     << ", padding " << padding);
                    if (!detail::uses_patch_products<float>(shape)) {
                        REQUIRE(shape.out_width() > 16); // only padding 2 at 31 and 32 wide falls outside
                        continue;
                    }
                    ++shapes;
                    const auto input = petra::test::random_vector<float>(shape.input_count(), generator);
                    const auto weights = petra::test::random_vector<float>(shape.weight_count(), generator);
                    for (const float beta : {0.0f, -0.5f}) {
                        auto direct = beta == 0.0f ? petra::test::nan_vector<float>(shape.output_count())
                                                   : petra::test::random_vector<float>(shape.output_count(), generator);
                        auto products = direct;
                        scratch_source scratch;
                        detail::forward_accumulate_images(shape, input.data(), weights.data(), direct.data(), beta,
                                                          scratch);
                        detail::patch_forward(detail::patch_geometry_of(shape), shape.batch, input.data(),
                                              weights.data(), products.data(), beta, scratch);
                        if (beta == 0.0f) {
                            CHECK(products == direct);
                        } else {
                            petra::test::check_close(products, direct,
                                                     petra::test::accumulation_tolerance<float>(shape.patch_size()));
                        }
                    }
                    if (!detail::uses_patch_input_gradient<float>(shape)) continue;
                    REQUIRE((padding == 1 && width % 2 == 0));
                    ++gradient_shapes;
                    const auto grad_y = petra::test::random_vector<float>(shape.output_count(), generator);
                    for (const float beta : {0.0f, -0.5f}) {
                        auto direct = beta == 0.0f ? petra::test::nan_vector<float>(shape.input_count())
                                                   : petra::test::random_vector<float>(shape.input_count(), generator);
                        auto products = direct;
                        scratch_source scratch;
                        detail::backward_input_by_phases_images(shape, grad_y.data(), weights.data(), direct.data(),
                                                                beta, scratch);
                        detail::patch_backward_input(detail::patch_geometry_of(shape), shape.batch,
                                                     detail::patch_group_images<float>(shape), grad_y.data(),
                                                     weights.data(), products.data(), beta, scratch);
                        // Both store through store_row_interleaved: the same bits with beta too.
                        CHECK(products == direct);
                    }
                }
    CHECK(shapes > 100);
    CHECK(gradient_shapes > 20);
}
#endif

#if defined(__AVX512F__)
// The stride-2 phase planes written row by row, each phase row whole with its
// zeros (split_stride_two_by_row_gathers, taken by prepare_input_into where
// phase rows hold at most 16 floats), hold the same bits as the planes
// zeroed first and then filled (split_stride_two): both kernels, every
// padding, odd and even sides, up to the widest row the rows take.
TEST_CASE("a stride-2 phased copy written in whole rows equals the planes zeroed and then filled")
{
    using namespace petra::kernels;
    std::mt19937_64 generator(7);
    std::size_t compared = 0;
    for (std::size_t kernel : {1, 3}) {
        for (std::size_t padding = 0; padding < kernel; ++padding) {
            // (Plain pairs, not structured bindings: clang 14's lambdas, which
            // CAPTURE makes, cannot name a binding.)
            for (const auto& sides : {std::pair<std::size_t, std::size_t>{28, 28},
                                      {14, 14},
                                      {13, 14},
                                      {14, 13},
                                      {7, 7},
                                      {1, 2},
                                      {3, 30},
                                      {5, 32},
                                      {2, 31}}) {
                const std::size_t height = sides.first, width = sides.second;
                const convolution_shape shape{3, 2, height, width, 4, kernel, 2, padding};
                if (height + 2 * padding < kernel || width + 2 * padding < kernel) continue;
                CAPTURE(kernel);
                CAPTURE(padding);
                CAPTURE(height);
                CAPTURE(width);
                // Phase rows of 17 values or more (a width of 32 with padding) keep split_stride_two.
                if (!detail::padded_row_gather::fits(detail::phase_width(shape), shape.in_width)) {
                    CHECK(width + 2 * padding > 32);
                    continue;
                }
                ++compared;
                const auto input = petra::test::random_vector<float>(shape.input_count(), generator);
                const std::size_t count = detail::phased_input_count<float>(shape);
                // Different leftovers in each, so that a value either leaves unwritten shows.
                std::vector<float> zeroed_first(count, 7.0f), whole_rows(count, -3.0f), prepared(count, 5.0f);
                detail::split_stride_two(shape, input.data(), zeroed_first.data());
                detail::split_stride_two_by_row_gathers(shape, input.data(), whole_rows.data());
                detail::prepare_input_into(shape, input.data(), prepared.data());
                const std::size_t planes = count - 2 * petra::kernels::simd_width<float>;
                CHECK(std::equal(whole_rows.begin(), whole_rows.begin() + planes, zeroed_first.begin()));
                CHECK(std::equal(prepared.begin(), prepared.begin() + planes, whole_rows.begin()));
            }
        }
    }
    CHECK(compared >= 20);
}
#endif

TEST_CASE("convolution rejects unsupported shapes with a message that names the problem")
{
    std::vector<float> buffer(1024);
    auto forward = [&](convolution_shape shape) {
        petra::kernels::convolution_forward<float>(shape, buffer.data(), buffer.data(), buffer.data());
    };
    CHECK_THROWS_WITH_AS(forward({1, 1, 8, 8, 1, 5, 1, 0}), doctest::Contains("kernel must be 1 or 3"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(forward({1, 1, 8, 8, 1, 3, 3, 1}), doctest::Contains("stride must be 1 or 2"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(forward({1, 1, 8, 8, 1, 3, 1, 3}), doctest::Contains("padding"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(forward({1, 1, 1, 1, 1, 3, 1, 0}), doctest::Contains("smaller than the kernel"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(forward({1, 0, 8, 8, 1, 3, 1, 1}), doctest::Contains("channel"), std::invalid_argument);
}

namespace {

// A region of `bytes` bytes on a cache-line boundary, followed by a cache
// line of guard bytes that a kernel must not touch.
struct guarded_region {
    static constexpr std::byte guard{0x5a};
    std::vector<std::byte> storage;
    std::span<std::byte> region;

    explicit guarded_region(std::size_t bytes) : storage(bytes + 3 * petra::kernels::buffer_alignment, guard)
    {
        const auto address = reinterpret_cast<std::uintptr_t>(storage.data());
        const std::size_t skip = (petra::kernels::buffer_alignment - address % petra::kernels::buffer_alignment) %
                                 petra::kernels::buffer_alignment;
        region = std::span<std::byte>(storage.data() + skip, bytes);
    }
    bool guard_intact() const
    {
        const std::byte* end = region.data() + region.size();
        return std::all_of(end, end + petra::kernels::buffer_alignment, [](std::byte b) { return b == guard; });
    }
};

} // namespace

TEST_CASE_TEMPLATE("convolutions in a caller's scratch region compute the same numbers and stay inside it", T, float,
                   double)
{
    using namespace petra::kernels;
    std::mt19937_64 generator(4);
    for_each_shape([&](const convolution_shape& shape) {
        const auto input = petra::test::random_vector<T>(shape.input_count(), generator);
        const auto weights = petra::test::random_vector<T>(shape.weight_count(), generator);
        const auto grad_y = petra::test::random_vector<T>(shape.output_count(), generator);

        auto per_thread = petra::test::nan_vector<T>(shape.output_count()), carved = per_thread;
        guarded_region forward(convolution_forward_scratch<T>(shape).region_bytes());
        convolution_forward(shape, input.data(), weights.data(), per_thread.data());
        convolution_forward(shape, input.data(), weights.data(), carved.data(), forward.region);
        CHECK(std::equal(per_thread.begin(), per_thread.end(), carved.begin()));
        CHECK(forward.guard_intact());

        auto input_gradient = petra::test::nan_vector<T>(shape.input_count()), carved_input_gradient = input_gradient;
        guarded_region backward_input(convolution_backward_input_scratch<T>(shape).region_bytes());
        convolution_backward_input(shape, grad_y.data(), weights.data(), input_gradient.data());
        convolution_backward_input(shape, grad_y.data(), weights.data(), carved_input_gradient.data(), T(0),
                                   backward_input.region);
        CHECK(std::equal(input_gradient.begin(), input_gradient.end(), carved_input_gradient.begin()));
        CHECK(backward_input.guard_intact());

        auto weight_gradient = petra::test::nan_vector<T>(shape.weight_count()),
             carved_weight_gradient = weight_gradient;
        guarded_region backward_weights(convolution_backward_weights_scratch<T>(shape).region_bytes());
        convolution_backward_weights(shape, input.data(), grad_y.data(), weight_gradient.data());
        convolution_backward_weights(shape, input.data(), grad_y.data(), carved_weight_gradient.data(), T(0),
                                     backward_weights.region);
        CHECK(std::equal(weight_gradient.begin(), weight_gradient.end(), carved_weight_gradient.begin()));
        CHECK(backward_weights.guard_intact());

        // The demands are exact: one cache line less does not do (for the
        // input gradient with beta != 0, which Winograd's form stages).
        guarded_region short_region(convolution_forward_scratch<T>(shape).region_bytes() - buffer_alignment);
        CHECK_THROWS_WITH_AS(
            convolution_forward(shape, input.data(), weights.data(), carved.data(), short_region.region),
            doctest::Contains("scratch region is too small"), std::invalid_argument);
        guarded_region short_input(convolution_backward_input_scratch<T>(shape).region_bytes() - buffer_alignment);
        CHECK_THROWS_WITH_AS(convolution_backward_input(shape, grad_y.data(), weights.data(),
                                                        carved_input_gradient.data(), T(1), short_input.region),
                             doctest::Contains("scratch region is too small"), std::invalid_argument);
        guarded_region short_weights(convolution_backward_weights_scratch<T>(shape).region_bytes() - buffer_alignment);
        CHECK_THROWS_WITH_AS(convolution_backward_weights(shape, input.data(), grad_y.data(),
                                                          carved_weight_gradient.data(), T(0), short_weights.region),
                             doctest::Contains("scratch region is too small"), std::invalid_argument);
    });
}

TEST_CASE("a convolution's scratch demand is a compile-time figure, merged per buffer")
{
    using namespace petra::kernels;
    // Stride 2: the direct form (a 5x5 kernel, which only the direct form
    // takes on every instruction set; the 3x3 ones take patch products on
    // AVX-512, pointwise.hpp).
    constexpr convolution_shape shape{64, 16, 28, 28, 32, 5, 2, 2};
    // The phased input of one chunk of images (16 channels x 4 phases of
    // 16 x 16 per image, 15 images within winograd_max_group_bytes, the
    // ceiling of any core's budget, and two vectors of slack), the tap
    // offsets, the packed weights and (its output rows of 14 values, the row
    // blocks) an image's output planes of one block of channels: each on its
    // own cache lines.
    constexpr scratch_demand forward = convolution_forward_scratch<float>(shape);
    static_assert(detail::uses_row_blocks<float>(shape));
    static_assert(forward.buffer_count() == 4);
    static_assert(detail::forward_chunk_images<float>(shape) == 15);
    static_assert(forward.thread_bytes() >= 15 * 16 * 32 * 32 * sizeof(float));
    static_assert(forward.thread_bytes() < 2 * detail::winograd_max_group_bytes);
    // Winograd's form: six buffers (the input transposed into its border,
    // the transformed patches, weights and products, one image's results, the
    // output statistics' running sums), of one group of images at most (its
    // patches and products within winograd_max_group_bytes, the ceiling of
    // any core's budget); the input gradient, which may accumulate, also
    // stages one image's results.
    constexpr scratch_demand winograd = convolution_forward_scratch<float>({64, 16, 28, 28, 16, 3, 1, 1});
    static_assert(winograd.buffer_count() == 6);
    static_assert(convolution_backward_input_scratch<float>({64, 16, 28, 28, 16, 3, 1, 1}).buffer_count() == 7);
    static_assert(winograd.thread_bytes() < 2 * detail::winograd_max_group_bytes);
    static_assert(forward.region_bytes() >= forward.thread_bytes());
    // The weight gradient reads the same phased input: one buffer, the larger
    // request, for per-thread memory; the larger region for a caller's.
    constexpr scratch_demand step = scratch_demand(forward).merge(convolution_backward_weights_scratch<float>(shape));
    static_assert(step.region_bytes() ==
                  std::max(forward.region_bytes(), convolution_backward_weights_scratch<float>(shape).region_bytes()));
    static_assert(step.buffer_count() <
                  forward.buffer_count() + convolution_backward_weights_scratch<float>(shape).buffer_count());
    CHECK(convolution_forward_scratch<float>({0, 16, 28, 28, 16, 3, 1, 1}).region_bytes() == 0);

    // A region must start on a cache line.
    std::vector<float> buffer(4 * 4);
    alignas(64) std::byte region[4096];
    CHECK_THROWS_WITH_AS(convolution_forward<float>({1, 1, 4, 4, 1, 3, 1, 1}, buffer.data(), buffer.data(),
                                                    buffer.data(), std::span<std::byte>(region + 4, 1024)),
                         doctest::Contains("64-byte boundary"), std::invalid_argument);
}

// The transposition under the convolutions' gathers: every value lands where
// its pixel's row puts it, and nothing else is written (the border and the
// padding channels the kernels rely on being zero stay as they were). The
// channel and pixel counts straddle the register blocks (16 x 16 on AVX-512,
// 8 x 8 on AVX2); rows of 7, 14 and 28 pixels make blocks that span rows.
TEST_CASE_TEMPLATE("transpose_channels_to_rows puts every pixel where its row layout says", T, float, double)
{
    using namespace petra::kernels;
    std::mt19937_64 generator(7);
    for (const std::size_t channels : {1, 16, 17, 35}) {
        for (const std::size_t row_width : {7, 14, 28}) {
            for (const std::size_t row_count : {1, 2, 5}) {
                const std::size_t pixels = row_width * row_count;
                const std::size_t from_stride = pixels + 3, stride = channels + 2, pitch = (row_width + 3) * stride;
                CAPTURE(channels);
                CAPTURE(row_width);
                CAPTURE(row_count);
                const auto from = petra::test::random_vector<T>(channels * from_stride, generator);
                const T untouched = T(-1234.5);
                std::vector<T> to(row_count * pitch + stride, untouched);
                detail::transpose_channels_to_rows(from.data(), from_stride, channels, pixels, to.data() + stride,
                                                   detail::pixel_rows{row_width, pitch, stride});
                std::vector<bool> written(to.size(), false);
                bool placed = true;
                for (std::size_t c = 0; c < channels; ++c) {
                    for (std::size_t p = 0; p < pixels; ++p) {
                        const std::size_t at = stride + (p / row_width) * pitch + (p % row_width) * stride + c;
                        placed = placed && to[at] == from[c * from_stride + p];
                        written[at] = true;
                    }
                }
                CHECK(placed);
                bool others_kept = true;
                for (std::size_t i = 0; i < to.size(); ++i)
                    others_kept = others_kept && (written[i] || to[i] == untouched);
                CHECK(others_kept);
            }
        }
    }
}

namespace {

// x mapped as an affine_relu_map maps it, value by value, and the map's
// arrays: scales of both signs, so that the ReLU cuts values in every
// channel.
template <class T>
struct mapped_input {
    std::vector<T> scale, shift, mapped;

    mapped_input(const convolution_shape& shape, const std::vector<T>& x, std::mt19937_64& generator)
        : scale(petra::test::random_vector<T>(shape.in_channels, generator, T(-1.5), T(1.5))),
          shift(petra::test::random_vector<T>(shape.in_channels, generator, T(-0.5), T(0.5))), mapped(x.size())
    {
        const auto apply = map();
        const std::size_t pixels = shape.input_pixels();
        for (std::size_t i = 0; i < x.size(); ++i) mapped[i] = apply(i / pixels % shape.in_channels, x[i]);
    }
    petra::kernels::affine_relu_map<T> map() const { return {scale.data(), shift.data()}; }
};

} // namespace

TEST_CASE_TEMPLATE("an input map gives the forward and the weight gradient of the mapped input, to the bit", T, float,
                   double)
{
    std::mt19937_64 generator(31);
    namespace kernels = petra::kernels;
    // 16 channels: whole 16 x 16 blocks of the transposition in float (and
    // its scalar tail: 63 pixels); 9: the scalar path alone; 9 images of 9
    // channels: more than one Winograd group.
    for (const convolution_shape& shape :
         {convolution_shape{3, 16, 7, 9, 16, 3, 1, 1}, convolution_shape{2, 9, 5, 6, 12, 3, 1, 1},
          convolution_shape{9, 9, 7, 9, 12, 3, 1, 1}}) {
        CAPTURE(shape.in_channels);
        REQUIRE(kernels::convolution_takes_input_map(shape));
        const auto x = petra::test::random_vector<T>(shape.input_count(), generator);
        const auto weights = petra::test::random_vector<T>(shape.weight_count(), generator);
        const auto grad_y = petra::test::random_vector<T>(shape.output_count(), generator);
        const mapped_input<T> input(shape, x, generator);
        const auto zeros = std::count(input.mapped.begin(), input.mapped.end(), T(0));
        CHECK(zeros > 0);
        CHECK(zeros < std::ptrdiff_t(x.size()));

        auto expected = petra::test::nan_vector<T>(shape.output_count()), actual = expected;
        kernels::convolution_forward(shape, input.mapped.data(), weights.data(), expected.data());
        kernels::convolution_forward(shape, x.data(), weights.data(), actual.data(), {}, input.map());
        CHECK(actual == expected);

        auto expected_weights = petra::test::random_vector<T>(shape.weight_count(), generator),
             actual_weights = expected_weights;
        kernels::convolution_backward_weights(shape, input.mapped.data(), grad_y.data(), expected_weights.data(), T(1));
        kernels::convolution_backward_weights(shape, x.data(), grad_y.data(), actual_weights.data(), T(1), {},
                                              input.map());
        CHECK(actual_weights == expected_weights);
    }
    // The direct form takes no map: refused in one sentence.
    const convolution_shape direct{1, 4, 5, 5, 4, 3, 2, 1};
    CHECK_FALSE(kernels::convolution_takes_input_map(direct));
    const auto x = petra::test::random_vector<T>(direct.input_count(), generator);
    const auto weights = petra::test::random_vector<T>(direct.weight_count(), generator);
    const mapped_input<T> input(direct, x, generator);
    std::vector<T> y(direct.output_count());
    CHECK_THROWS_WITH_AS(kernels::convolution_forward(direct, x.data(), weights.data(), y.data(), {}, input.map()),
                         doctest::Contains("an input map needs a 3x3 stride-1 shape"), std::invalid_argument);
}

TEST_CASE_TEMPLATE("affine_relu_map rounds as channel_affine_relu: one fused multiply-add, -0 and below to 0, NaN kept",
                   T, float, double)
{
    const T scale[] = {T(3), T(-1), T(1)};
    const T shift[] = {T(0.1), -T(0), T(0)};
    const petra::kernels::affine_relu_map<T> map{scale, shift};
    const T third = T(1) / T(3);
    CHECK(map(0, third) == std::fma(T(3), third, T(0.1)));
    CHECK(map(1, T(2)) == T(0));
    const T zero = map(1, T(0)); // -1 * 0 - 0 = -0
    CHECK(zero == T(0));
    CHECK_FALSE(std::signbit(zero));
    CHECK(std::isnan(map(2, std::numeric_limits<T>::quiet_NaN())));
    CHECK_FALSE(petra::kernels::affine_relu_map<T>{});
}
