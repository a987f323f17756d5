// Softmax and softmax cross-entropy against a double reference, over row and
// class counts that put classes in the vector loop, the scalar tail, or both;
// plus a finite-difference check of the gradient and the error cases.
#include <petra/kernels/softmax.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include <doctest/doctest.h>

#include "reference/softmax.hpp"
#include "support.hpp"

namespace {

using petra::test::accumulation_tolerance;
using petra::test::check_close;
using petra::test::nan_vector;
using petra::test::random_vector;

constexpr std::size_t row_counts[] = {1, 7, 64, 100};
constexpr std::size_t class_counts[] = {1, 2, 7, 10, 17, 100};

// 0 for ordinary logits; 1000 makes exp overflow in float and double alike
// unless the row maximum is subtracted first.
constexpr double logit_offsets[] = {0.0, 1000.0};

// Padding added to the leading dimensions, so that rows are not contiguous and
// the kernels must respect ld.
constexpr std::size_t logits_padding = 3;
constexpr std::size_t output_padding = 1;

std::mt19937_64 generator_for(std::size_t rows, std::size_t classes, double offset, std::uint64_t kernel)
{
    return std::mt19937_64(1000003 * kernel + 10007 * rows + 101 * classes + static_cast<std::uint64_t>(offset));
}

// rows x classes logits in [offset - 5, offset + 5) with leading dimension ld;
// the padding holds NaN, so that a kernel reading it fails.
template <class T>
std::vector<T> random_logits(std::size_t rows, std::size_t classes, std::size_t ld, double offset,
                             std::mt19937_64& generator)
{
    std::vector<T> logits = nan_vector<T>(rows * ld);
    const auto values = random_vector<T>(rows * classes, generator, T(offset - 5), T(offset + 5));
    for (std::size_t r = 0; r < rows; ++r) {
        std::copy_n(values.begin() + static_cast<std::ptrdiff_t>(r * classes), classes,
                    logits.begin() + static_cast<std::ptrdiff_t>(r * ld));
    }
    return logits;
}

std::vector<std::int32_t> random_labels(std::size_t rows, std::size_t classes, std::mt19937_64& generator)
{
    std::uniform_int_distribution<std::int32_t> distribution(0, static_cast<std::int32_t>(classes) - 1);
    std::vector<std::int32_t> labels(rows);
    for (auto& label : labels) label = distribution(generator);
    return labels;
}

// The rows x classes block of a matrix with leading dimension ld, packed.
// Checks that the padding after each row is still NaN, i.e. never written.
template <class T>
std::vector<T> packed_checking_padding(const std::vector<T>& matrix, std::size_t rows, std::size_t classes,
                                       std::size_t ld)
{
    std::vector<T> packed(rows * classes);
    bool padding_untouched = true;
    for (std::size_t r = 0; r < rows; ++r) {
        for (std::size_t j = 0; j < ld; ++j) {
            if (j < classes) {
                packed[r * classes + j] = matrix[r * ld + j];
            } else {
                padding_untouched = padding_untouched && std::isnan(matrix[r * ld + j]);
            }
        }
    }
    CHECK(padding_untouched);
    return packed;
}

template <class T>
std::vector<T> rounded_to(const std::vector<double>& values)
{
    return std::vector<T>(values.begin(), values.end());
}

// Each probability carries the error of one exp (a few units of rounding), of
// its row's sum of `classes` positive terms, and of one division; probabilities
// are at most 1, so the bound is absolute.
template <class T>
T probability_tolerance(std::size_t classes)
{
    return accumulation_tolerance<T>(classes + 4);
}

template <class T>
void check_rows_sum_to_one(const std::vector<T>& probabilities, std::size_t rows, std::size_t classes)
{
    for (std::size_t r = 0; r < rows; ++r) {
        double total = 0.0;
        for (std::size_t j = 0; j < classes; ++j) total += static_cast<double>(probabilities[r * classes + j]);
        CAPTURE(r);
        CHECK(std::abs(total - 1.0) <= 2.0 * static_cast<double>(probability_tolerance<T>(classes)));
    }
}

} // namespace

TEST_CASE_TEMPLATE("softmax_rows matches the reference", T, float, double)
{
    for (std::size_t rows : row_counts) {
        for (std::size_t classes : class_counts) {
            for (double offset : logit_offsets) {
                CAPTURE(rows);
                CAPTURE(classes);
                CAPTURE(offset);
                auto generator = generator_for(rows, classes, offset, 1);
                const std::size_t ld_logits = classes + logits_padding;
                const std::size_t ld_out = classes + output_padding;
                const auto logits = random_logits<T>(rows, classes, ld_logits, offset, generator);
                const auto expected = rounded_to<T>(petra::reference::softmax_rows(rows, classes, logits, ld_logits));

                auto out = nan_vector<T>(rows * ld_out);
                petra::kernels::softmax_rows(rows, classes, logits.data(), ld_logits, out.data(), ld_out);
                const auto probabilities = packed_checking_padding(out, rows, classes, ld_out);
                check_close(probabilities, expected, probability_tolerance<T>(classes));
                check_rows_sum_to_one(probabilities, rows, classes);

                auto in_place = logits;
                petra::kernels::softmax_rows(rows, classes, in_place.data(), ld_logits, in_place.data(), ld_logits);
                check_close(packed_checking_padding(in_place, rows, classes, ld_logits), expected,
                            probability_tolerance<T>(classes));
            }
        }
    }
}

TEST_CASE_TEMPLATE("softmax_rows gives the worked example and writes nothing for an empty matrix", T, float, double)
{
    const std::vector<T> logits{T(1), T(2), T(3)};
    auto out = nan_vector<T>(3);
    petra::kernels::softmax_rows(1, 3, logits.data(), 3, out.data(), 3);
    check_close(out, std::vector<T>{T(0.09003057317038046), T(0.24472847105479764), T(0.6652409557748219)},
                probability_tolerance<T>(3));

    auto untouched = nan_vector<T>(3);
    petra::kernels::softmax_rows(0, 3, logits.data(), 3, untouched.data(), 3);
    petra::kernels::softmax_rows(1, 0, logits.data(), 3, untouched.data(), 3);
    for (T value : untouched) CHECK(std::isnan(value));
}

TEST_CASE_TEMPLATE("softmax_cross_entropy matches the reference", T, float, double)
{
    for (std::size_t rows : row_counts) {
        for (std::size_t classes : class_counts) {
            for (double offset : logit_offsets) {
                CAPTURE(rows);
                CAPTURE(classes);
                CAPTURE(offset);
                auto generator = generator_for(rows, classes, offset, 2);
                const std::size_t ld = classes + logits_padding;
                const std::size_t ld_out = classes + output_padding;
                const auto logits = random_logits<T>(rows, classes, ld, offset, generator);
                const auto labels = random_labels(rows, classes, generator);
                const auto expected = petra::reference::softmax_cross_entropy(rows, classes, logits, ld, labels);
                const auto expected_probabilities = rounded_to<T>(expected.probabilities);
                const auto expected_gradient = rounded_to<T>(expected.gradient);

                // The loss of a row is a logarithm of a sum of `classes` terms
                // minus one exact difference; the mean adds `rows` of them.
                const T loss_tolerance = accumulation_tolerance<T>(rows + classes);
                // The gradient is a probability divided by rows.
                const T gradient_tolerance = probability_tolerance<T>(classes) / static_cast<T>(rows);
                const std::vector<T> expected_loss{static_cast<T>(expected.mean_loss)};

                for (bool want_probabilities : {true, false}) {
                    for (bool want_gradient : {true, false}) {
                        CAPTURE(want_probabilities);
                        CAPTURE(want_gradient);
                        auto probabilities = nan_vector<T>(rows * ld_out);
                        auto gradient = nan_vector<T>(rows * ld_out);
                        const T loss = petra::kernels::softmax_cross_entropy<T>(
                            {.rows = rows,
                             .classes = classes,
                             .logits = logits.data(),
                             .ld_logits = ld,
                             .labels = labels.data(),
                             .probabilities = want_probabilities ? probabilities.data() : nullptr,
                             .grad_logits = want_gradient ? gradient.data() : nullptr,
                             .ld_out = ld_out});
                        check_close(std::vector<T>{loss}, expected_loss, loss_tolerance);
                        if (want_probabilities) {
                            const auto packed = packed_checking_padding(probabilities, rows, classes, ld_out);
                            check_close(packed, expected_probabilities, probability_tolerance<T>(classes));
                            check_rows_sum_to_one(packed, rows, classes);
                        } else {
                            CHECK(std::all_of(probabilities.begin(), probabilities.end(),
                                              [](T value) { return std::isnan(value); }));
                        }
                        if (want_gradient) {
                            check_close(packed_checking_padding(gradient, rows, classes, ld_out), expected_gradient,
                                        gradient_tolerance);
                        } else {
                            CHECK(std::all_of(gradient.begin(), gradient.end(),
                                              [](T value) { return std::isnan(value); }));
                        }
                    }
                }
            }
        }
    }
}

TEST_CASE_TEMPLATE("softmax_cross_entropy gives the worked example", T, float, double)
{
    const std::vector<T> logits{T(0), T(0)};
    const std::int32_t label = 1;
    auto probabilities = nan_vector<T>(2);
    auto gradient = nan_vector<T>(2);
    const T loss = petra::kernels::softmax_cross_entropy<T>({.rows = 1,
                                                             .classes = 2,
                                                             .logits = logits.data(),
                                                             .ld_logits = 2,
                                                             .labels = &label,
                                                             .probabilities = probabilities.data(),
                                                             .grad_logits = gradient.data(),
                                                             .ld_out = 2});
    const T tolerance = T(4) * std::numeric_limits<T>::epsilon();
    check_close(std::vector<T>{loss}, std::vector<T>{T(0.6931471805599453)}, tolerance);
    check_close(probabilities, std::vector<T>{T(0.5), T(0.5)}, tolerance);
    check_close(gradient, std::vector<T>{T(0.5), T(-0.5)}, tolerance);
}

TEST_CASE_TEMPLATE("one dominant logit anywhere in the row neither overflows nor is missed", T, float, double)
{
    // exp(1000) overflows float and double alike, so if the row maximum missed
    // the dominant logit (in the first vector, a later one, or the scalar
    // tail), the result would hold inf or NaN.
    const std::size_t classes = 100;
    for (std::size_t position = 0; position < classes; ++position) {
        CAPTURE(position);
        std::vector<T> logits(classes, T(0));
        logits[position] = T(1000);
        std::vector<T> one_hot(classes, T(0));
        one_hot[position] = T(1);

        auto probabilities = nan_vector<T>(classes);
        petra::kernels::softmax_rows(1, classes, logits.data(), classes, probabilities.data(), classes);
        check_close(probabilities, one_hot, T(0));

        const auto label = static_cast<std::int32_t>(position);
        probabilities = nan_vector<T>(classes);
        const T loss = petra::kernels::softmax_cross_entropy<T>({.rows = 1,
                                                                 .classes = classes,
                                                                 .logits = logits.data(),
                                                                 .ld_logits = classes,
                                                                 .labels = &label,
                                                                 .probabilities = probabilities.data(),
                                                                 .grad_logits = nullptr,
                                                                 .ld_out = classes});
        check_close(probabilities, one_hot, T(0));
        CHECK(loss == T(0));
    }
}

TEST_CASE("softmax_cross_entropy's gradient matches a central finite difference of its loss")
{
    const std::size_t rows = 3, classes = 5;
    std::mt19937_64 generator(7);
    auto logits = random_vector<double>(rows * classes, generator, -2.0, 2.0);
    const std::vector<std::int32_t> labels{4, 0, 2};
    auto gradient = nan_vector<double>(rows * classes);
    petra::kernels::softmax_cross_entropy<double>({.rows = rows,
                                                   .classes = classes,
                                                   .logits = logits.data(),
                                                   .ld_logits = classes,
                                                   .labels = labels.data(),
                                                   .probabilities = nullptr,
                                                   .grad_logits = gradient.data(),
                                                   .ld_out = classes});

    // With h = 1e-5 the truncation error, about h^2 times the third
    // derivative, is near 1e-11, and the rounding error, about eps / h, near
    // 1e-11: both far below 1e-6 of the largest gradient element (about 0.2).
    const double h = 1e-5;
    const auto loss = [&] {
        return petra::kernels::softmax_cross_entropy<double>({.rows = rows,
                                                              .classes = classes,
                                                              .logits = logits.data(),
                                                              .ld_logits = classes,
                                                              .labels = labels.data(),
                                                              .probabilities = nullptr,
                                                              .grad_logits = nullptr,
                                                              .ld_out = classes});
    };
    double largest = 0.0;
    for (double value : gradient) largest = std::max(largest, std::abs(value));
    REQUIRE(largest > 0.0);
    for (std::size_t i = 0; i < rows * classes; ++i) {
        const double saved = logits[i];
        logits[i] = saved + h;
        const double above = loss();
        logits[i] = saved - h;
        const double below = loss();
        logits[i] = saved;
        const double finite_difference = (above - below) / (2.0 * h);
        CAPTURE(i);
        CAPTURE(finite_difference);
        CAPTURE(gradient[i]);
        CHECK(std::abs(finite_difference - gradient[i]) < 1e-6 * largest);
    }
}

TEST_CASE_TEMPLATE("softmax_cross_entropy rejects bad arguments before writing anything", T, float, double)
{
    const std::size_t rows = 4, classes = 10;
    std::mt19937_64 generator(11);
    const auto logits = random_vector<T>(rows * classes, generator);
    auto probabilities = nan_vector<T>(rows * classes);
    auto gradient = nan_vector<T>(rows * classes);
    const auto call = [&](std::size_t call_rows, std::size_t call_classes, const std::vector<std::int32_t>& labels) {
        return petra::kernels::softmax_cross_entropy<T>({.rows = call_rows,
                                                         .classes = call_classes,
                                                         .logits = logits.data(),
                                                         .ld_logits = classes,
                                                         .labels = labels.data(),
                                                         .probabilities = probabilities.data(),
                                                         .grad_logits = gradient.data(),
                                                         .ld_out = classes});
    };

    CHECK_THROWS_WITH_AS(call(rows, classes, {3, 1, 10, 0}), doctest::Contains("label 10 of row 2"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(call(rows, classes, {3, 1, 0, -1}), doctest::Contains("label -1 of row 3"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(call(rows, classes, {12, 1, 0, -1}), doctest::Contains("label 12 of row 0"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(call(0, classes, {}), doctest::Contains("rows is 0"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(call(rows, 0, {0, 0, 0, 0}), doctest::Contains("classes is 0"), std::invalid_argument);

    CHECK(std::all_of(probabilities.begin(), probabilities.end(), [](T value) { return std::isnan(value); }));
    CHECK(std::all_of(gradient.begin(), gradient.end(), [](T value) { return std::isnan(value); }));
}
