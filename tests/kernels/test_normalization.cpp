// The batch-normalisation kernels against their scalar references, in float
// and double, over row lengths around the vector width and its multiples.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <random>
#include <vector>

#include <doctest/doctest.h>

#include <petra/kernels/elementwise.hpp>
#include <petra/kernels/normalization.hpp>

#include "reference/normalization.hpp"
#include "support.hpp"

using namespace petra;

namespace {

template <class T>
void check_against(const std::vector<T>& actual, const std::vector<long double>& expected, T tolerance)
{
    REQUIRE(actual.size() == expected.size());
    for (std::size_t i = 0; i < actual.size(); ++i) {
        const long double error = std::abs((long double)actual[i] - expected[i]);
        if (!(error <= tolerance * std::max(1.0L, std::abs(expected[i])))) {
            INFO("index " << i << ": " << actual[i] << " against " << double(expected[i]));
            CHECK(false);
            return;
        }
    }
}

struct sizes {
    std::size_t N, C, S;
};

// The last two have more channels than the kernels keep sums for at once
// (32 and 64: reduction.hpp, normalization.hpp), the last chunk a partial one.
const sizes cases[] = {{1, 1, 1},   {2, 3, 7},   {3, 2, 16},  {2, 4, 33}, {4, 3, 49},
                       {2, 2, 196}, {3, 1, 257}, {3, 70, 19}, {2, 131, 5}};

} // namespace

TEST_CASE_TEMPLATE("channel_affine and channel_combination match the reference", T, float, double)
{
    std::mt19937_64 generator(1);
    for (const sizes& size : cases) {
        const std::size_t N = size.N, C = size.C, S = size.S;
        CAPTURE(N);
        CAPTURE(C);
        CAPTURE(S);
        const auto x = test::random_vector<T>(N * C * S, generator),
                   grad_y = test::random_vector<T>(N * C * S, generator);
        // The same three random vectors serve as scale and shift, and as
        // the combination's three coefficients.
        const auto a = test::random_vector<T>(C, generator), b = test::random_vector<T>(C, generator),
                   d = test::random_vector<T>(C, generator);
        auto y = test::nan_vector<T>(x.size());
        kernels::channel_affine<T>({.batch = N,
                                    .channels = C,
                                    .positions = S,
                                    .x = x.data(),
                                    .scale = a.data(),
                                    .shift = b.data(),
                                    .y = y.data()});
        check_against(y, reference::channel_affine(N, C, S, x, a, b), 4 * test::accumulation_tolerance<T>(1));
        auto grad_x = test::nan_vector<T>(x.size());
        kernels::channel_combination<T>({.batch = N,
                                         .channels = C,
                                         .positions = S,
                                         .grad_y = grad_y.data(),
                                         .x = x.data(),
                                         .grad_y_coefficient = a.data(),
                                         .x_coefficient = b.data(),
                                         .offset = d.data(),
                                         .grad_x = grad_x.data()});
        check_against(grad_x, reference::channel_combination(N, C, S, grad_y, x, a, b, d),
                      4 * test::accumulation_tolerance<T>(3));
#if defined(__FMA__) || defined(__aarch64__)
        // Where the CPU fuses multiply-adds, every value is rounded as one
        // scalar fma rounds it, wherever it falls in its row (a whole vector
        // or the row's tail).
        for (std::size_t i = 0; i < x.size(); ++i) {
            const std::size_t c = i / S % C;
            if (y[i] != std::fma(a[c], x[i], b[c]) ||
                grad_x[i] != std::fma(a[c], grad_y[i], std::fma(b[c], x[i], d[c]))) {
                INFO("value " << i << " of a row of " << S);
                CHECK(false);
                break;
            }
        }
#endif
        // In place, over x.
        auto in_place = x;
        kernels::channel_affine<T>({.batch = N,
                                    .channels = C,
                                    .positions = S,
                                    .x = in_place.data(),
                                    .scale = a.data(),
                                    .shift = b.data(),
                                    .y = in_place.data()});
        CHECK(in_place == y);
    }
}

TEST_CASE_TEMPLATE("channel_gradient_sums matches the reference", T, float, double)
{
    std::mt19937_64 generator(2);
    for (const sizes& size : cases) {
        const std::size_t N = size.N, C = size.C, S = size.S;
        CAPTURE(N);
        CAPTURE(C);
        CAPTURE(S);
        const auto x = test::random_vector<T>(N * C * S, generator), g = test::random_vector<T>(N * C * S, generator);
        const auto center = test::random_vector<T>(C, generator);
        auto sum_g = test::nan_vector<T>(C), sum_gd = test::nan_vector<T>(C);
        kernels::channel_gradient_sums<T>({.batch = N,
                                           .channels = C,
                                           .positions = S,
                                           .grad_y = g.data(),
                                           .x = x.data(),
                                           .mean = center.data(),
                                           .sum_grad_y = sum_g.data(),
                                           .sum_grad_y_deviation = sum_gd.data()});
        std::vector<long double> expected_g, expected_gd;
        reference::channel_gradient_sums(N, C, S, g, x, center, expected_g, expected_gd);
        // Blocked summation: no chain of additions is longer than about
        // S / 16 + N, so the error stays below that many roundings of the
        // sum of the terms' magnitudes.
        const long double roundings = (long double)(S / 16 + N + 16) * std::numeric_limits<T>::epsilon();
        for (std::size_t c = 0; c < C; ++c) {
            long double magnitude_g = 0, magnitude_gd = 0;
            for (std::size_t n = 0; n < N; ++n) {
                for (std::size_t i = (n * C + c) * S; i < (n * C + c + 1) * S; ++i) {
                    magnitude_g += std::abs((long double)g[i]);
                    magnitude_gd += std::abs((long double)g[i] * ((long double)x[i] - center[c]));
                }
            }
            CHECK(std::abs((long double)sum_g[c] - expected_g[c]) <= roundings * magnitude_g);
            CHECK(std::abs((long double)sum_gd[c] - expected_gd[c]) <= roundings * magnitude_gd);
        }
    }
}

// The fused kernels of batch_norm_relu compute what the unfused kernels
// compute one after another, to the bit (which the layer relies on).
TEST_CASE_TEMPLATE("the fused normalisation-and-ReLU kernels equal the unfused ones, bit for bit", T, float, double)
{
    std::mt19937_64 generator(3);
    for (const sizes& size : cases) {
        const std::size_t N = size.N, C = size.C, S = size.S;
        CAPTURE(N);
        CAPTURE(C);
        CAPTURE(S);
        const std::size_t count = N * C * S;
        const auto x = test::random_vector<T>(count, generator), g = test::random_vector<T>(count, generator);
        const auto scale = test::random_vector<T>(C, generator), shift = test::random_vector<T>(C, generator);
        const auto center = test::random_vector<T>(C, generator), a = test::random_vector<T>(C, generator),
                   b = test::random_vector<T>(C, generator), d = test::random_vector<T>(C, generator);

        std::vector<T> normalised(count), expected(count), fused(count);
        kernels::channel_affine<T>({.batch = N,
                                    .channels = C,
                                    .positions = S,
                                    .x = x.data(),
                                    .scale = scale.data(),
                                    .shift = shift.data(),
                                    .y = normalised.data()});
        kernels::relu_forward(count, normalised.data(), expected.data());
        kernels::channel_affine_relu<T>({.batch = N,
                                         .channels = C,
                                         .positions = S,
                                         .x = x.data(),
                                         .scale = scale.data(),
                                         .shift = shift.data(),
                                         .y = fused.data()});
        CHECK(fused == expected);
        // Values fall on both sides of the kink (for all but the tiniest case).
        const auto zeros = std::size_t(std::count(fused.begin(), fused.end(), T(0)));
        if (count >= 16) {
            CHECK(zeros > 0);
            CHECK(zeros < count);
        }

        std::vector<T> gated(count);
        kernels::relu_backward(count, normalised.data(), g.data(), gated.data());
        std::vector<T> sum_g(C), sum_gd(C), fused_g(C), fused_gd(C);
        kernels::channel_gradient_sums<T>({.batch = N,
                                           .channels = C,
                                           .positions = S,
                                           .grad_y = gated.data(),
                                           .x = x.data(),
                                           .mean = center.data(),
                                           .sum_grad_y = sum_g.data(),
                                           .sum_grad_y_deviation = sum_gd.data()});
        kernels::channel_relu_gradient_sums<T>({.batch = N,
                                                .channels = C,
                                                .positions = S,
                                                .grad_y = g.data(),
                                                .x = x.data(),
                                                .mean = center.data(),
                                                .scale = scale.data(),
                                                .shift = shift.data(),
                                                .sum_grad_y = fused_g.data(),
                                                .sum_grad_y_deviation = fused_gd.data()});
        CHECK(fused_g == sum_g);
        CHECK(fused_gd == sum_gd);

        std::vector<T> combined(count), fused_combined(count);
        kernels::channel_combination<T>({.batch = N,
                                         .channels = C,
                                         .positions = S,
                                         .grad_y = gated.data(),
                                         .x = x.data(),
                                         .grad_y_coefficient = a.data(),
                                         .x_coefficient = b.data(),
                                         .offset = d.data(),
                                         .grad_x = combined.data()});
        kernels::channel_relu_combination<T>({.batch = N,
                                              .channels = C,
                                              .positions = S,
                                              .grad_y = g.data(),
                                              .x = x.data(),
                                              .scale = scale.data(),
                                              .shift = shift.data(),
                                              .grad_y_coefficient = a.data(),
                                              .x_coefficient = b.data(),
                                              .offset = d.data(),
                                              .grad_x = fused_combined.data()});
        CHECK(fused_combined == combined);
    }
}
