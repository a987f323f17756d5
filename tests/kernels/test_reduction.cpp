// Per-channel reductions of NCHW batches against a double reference, over
// shapes that put rows in the vector loop, the scalar tail, or both.
#include <petra/kernels/reduction.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <doctest/doctest.h>

#include "reference/reduction.hpp"
#include "support.hpp"

namespace {

using petra::test::accumulation_tolerance;
using petra::test::check_close;
using petra::test::nan_vector;
using petra::test::random_vector;

constexpr std::size_t batch_sizes[] = {1, 3, 7};
constexpr std::size_t channel_counts[] = {1, 3, 16};
constexpr std::size_t spatial_sizes[] = {1, 7, 49, 196, 784};

std::mt19937_64 generator_for(std::size_t N, std::size_t C, std::size_t S, std::uint64_t kernel)
{
    return std::mt19937_64(1000003 * kernel + 10007 * N + 101 * C + S);
}

template <class T>
std::vector<T> rounded_to(const std::vector<double>& values)
{
    return std::vector<T>(values.begin(), values.end());
}

// The message of the std::invalid_argument that `call` throws, or "" if it
// throws nothing.
template <class Call>
std::string invalid_argument_message(Call&& call)
{
    try {
        call();
    } catch (const std::invalid_argument& error) {
        return error.what();
    }
    return "";
}

} // namespace

TEST_CASE_TEMPLATE("channel_sum matches the reference", T, float, double)
{
    for (std::size_t N : batch_sizes) {
        for (std::size_t C : channel_counts) {
            for (std::size_t S : spatial_sizes) {
                CAPTURE(N);
                CAPTURE(C);
                CAPTURE(S);
                auto generator = generator_for(N, C, S, 1);
                const auto x = random_vector<T>(N * C * S, generator);
                auto sum = nan_vector<T>(C);
                petra::kernels::channel_sum(N, C, S, x.data(), sum.data());
                check_close(sum, rounded_to<T>(petra::reference::channel_sum(N, C, S, x)),
                            accumulation_tolerance<T>(N * S));
            }
        }
    }
}

TEST_CASE_TEMPLATE("channel_sum of an empty batch is 0", T, float, double)
{
    // NaNs: a sum that read any of them would not be 0.
    const std::vector<T> x(64, std::numeric_limits<T>::quiet_NaN());
    for (const auto& sizes : {std::pair<std::size_t, std::size_t>{0, 5}, {4, 0}, {0, 0}}) {
        const std::size_t N = sizes.first, S = sizes.second;
        CAPTURE(N);
        CAPTURE(S);
        auto sum = nan_vector<T>(3);
        petra::kernels::channel_sum(N, 3, S, x.data(), sum.data());
        check_close(sum, std::vector<T>(3, T(0)), T(0));
    }
}

TEST_CASE_TEMPLATE("channel_mean_variance matches the reference", T, float, double)
{
    for (std::size_t N : batch_sizes) {
        for (std::size_t C : channel_counts) {
            for (std::size_t S : spatial_sizes) {
                CAPTURE(N);
                CAPTURE(C);
                CAPTURE(S);
                auto generator = generator_for(N, C, S, 2);
                // A mean away from 0, so that subtracting it matters.
                const auto x = random_vector<T>(N * C * S, generator, T(-1), T(3));
                auto mean = nan_vector<T>(C);
                auto variance = nan_vector<T>(C);
                petra::kernels::channel_mean_variance(N, C, S, x.data(), mean.data(), variance.data());
                const auto expected = petra::reference::channel_mean_variance(N, C, S, x);
                // Values of magnitude up to 3 and squares up to 9: the scale of
                // check_close absorbs the first, the factor 9 the second.
                check_close(mean, rounded_to<T>(expected.mean), accumulation_tolerance<T>(N * S));
                check_close(variance, rounded_to<T>(expected.variance), T(9) * accumulation_tolerance<T>(N * S));
            }
        }
    }
}

TEST_CASE_TEMPLATE("channel_mean_variance stays accurate when the mean dwarfs the spread", T, float, double)
{
    struct shape {
        std::size_t N, C, S;
    };
    for (const shape& sizes : {shape{7, 3, 784}, shape{3, 16, 196}, shape{1, 1, 49}, shape{7, 1, 7}}) {
        const std::size_t N = sizes.N, C = sizes.C, S = sizes.S;
        CAPTURE(N);
        CAPTURE(C);
        CAPTURE(S);
        auto generator = generator_for(N, C, S, 3);
        const auto x = random_vector<T>(N * C * S, generator, T(999), T(1001));
        auto mean = nan_vector<T>(C);
        auto variance = nan_vector<T>(C);
        petra::kernels::channel_mean_variance(N, C, S, x.data(), mean.data(), variance.data());
        const auto expected = petra::reference::channel_mean_variance(N, C, S, x);

        // check_close scales by the largest |mean| (about 1000), so this is a
        // relative bound.
        check_close(mean, rounded_to<T>(expected.mean), accumulation_tolerance<T>(N * S));

        // Relative bound on the variance (about 1/3). The deviations x - mean
        // are exact (x and the mean lie within a factor 2 of each other), the
        // error of the computed mean enters only squared, and what remains is
        // the rounding of a sum of N * S positive terms: relatively at most
        // about N * S units of rounding, which accumulation_tolerance covers
        // with a factor 4 to spare. The one-pass formula E[x^2] - E[x]^2
        // would instead lose about eps * 1e6 absolutely, 20% of the variance
        // in float; the last check shows that this bound tells the two apart.
        const T tolerance = accumulation_tolerance<T>(N * S);
        for (std::size_t c = 0; c < C; ++c) {
            CAPTURE(c);
            const double reference = expected.variance[c];
            CHECK(std::abs(static_cast<double>(variance[c]) - reference) <= tolerance * reference);

            if constexpr (std::is_same_v<T, float>) {
                float sum = 0.0f, sum_of_squares = 0.0f;
                for (std::size_t n = 0; n < N; ++n) {
                    for (std::size_t s = 0; s < S; ++s) {
                        const float value = x[(n * C + c) * S + s];
                        sum += value;
                        sum_of_squares += value * value;
                    }
                }
                const float count = static_cast<float>(N * S);
                const float one_pass = sum_of_squares / count - (sum / count) * (sum / count);
                CHECK(std::abs(static_cast<double>(one_pass) - reference) > tolerance * reference);
            }
        }
    }
}

// A batch larger than half of L2 is taken in groups of images whose
// statistics are merged (reduction.hpp); the shapes above fit one group, so
// here the groups are forced small: one image each, and three images each
// over 7 (a last group of one), over two chunks of channels (40 = 32 + 8),
// with a mean near 1 and a mean that dwarfs the spread.
TEST_CASE_TEMPLATE("channel_mean_variance merges groups of images within the bound of two passes over all", T, float,
                   double)
{
    constexpr std::size_t N = 7, C = 40;
    for (std::size_t S : {std::size_t(7), std::size_t(49)}) {
        for (const T low : {T(-1), T(999)}) {
            for (std::size_t group_images : {std::size_t(1), std::size_t(3)}) {
                CAPTURE(S);
                CAPTURE(low);
                CAPTURE(group_images);
                auto generator = generator_for(N, C, S, 5);
                const auto x = random_vector<T>(N * C * S, generator, low, low + T(2));
                auto mean = nan_vector<T>(C);
                auto variance = nan_vector<T>(C);
                const std::size_t group_bytes = group_images * petra::kernels::detail::channel_chunk * S * sizeof(T);
                petra::kernels::detail::grouped_mean_variance(N, C, S, x.data(), mean.data(), variance.data(),
                                                              group_bytes);
                const auto expected = petra::reference::channel_mean_variance(N, C, S, x);
                const T tolerance = accumulation_tolerance<T>(N * S);
                check_close(mean, rounded_to<T>(expected.mean), tolerance);
                for (std::size_t c = 0; c < C; ++c) {
                    CAPTURE(c);
                    const double reference = expected.variance[c];
                    CHECK(std::abs(static_cast<double>(variance[c]) - reference) <= tolerance * reference);
                }
            }
        }
    }
}

TEST_CASE_TEMPLATE("channel_mean_variance rejects a batch with no element per channel", T, float, double)
{
    const std::vector<T> x{T(1)};
    auto mean = nan_vector<T>(2);
    auto variance = nan_vector<T>(2);
    CHECK_THROWS_AS(petra::kernels::channel_mean_variance(0, 2, 5, x.data(), mean.data(), variance.data()),
                    std::invalid_argument);
    CHECK_THROWS_AS(petra::kernels::channel_mean_variance(4, 2, 0, x.data(), mean.data(), variance.data()),
                    std::invalid_argument);

    const std::string no_examples = invalid_argument_message(
        [&] { petra::kernels::channel_mean_variance(0, 2, 5, x.data(), mean.data(), variance.data()); });
    CHECK(no_examples.find("N = 0") != std::string::npos);
    CHECK(no_examples.find("S = 5") != std::string::npos);
    const std::string no_positions = invalid_argument_message(
        [&] { petra::kernels::channel_mean_variance(4, 2, 0, x.data(), mean.data(), variance.data()); });
    CHECK(no_positions.find("N = 4") != std::string::npos);
    CHECK(no_positions.find("S = 0") != std::string::npos);

    // Nothing is written before the throw.
    for (std::size_t c = 0; c < 2; ++c) {
        CHECK(std::isnan(mean[c]));
        CHECK(std::isnan(variance[c]));
    }
}
