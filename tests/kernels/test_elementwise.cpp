// Element-wise kernels against their scalar references, at lengths that put
// elements in the vector loop only, the scalar tail only, and both, with
// aligned and unaligned pointers.
#include <petra/kernels/elementwise.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <tuple>
#include <vector>

#include <doctest/doctest.h>

#include "reference/elementwise.hpp"
#include "support.hpp"

namespace {

using petra::test::check_close;
using petra::test::nan_vector;
using petra::test::random_vector;

constexpr std::size_t lengths[] = {1, 7, 8, 9, 15, 16, 17, 33, 100, 257, 1000};

// An offset of one element makes every pointer unaligned for the vector loads.
constexpr std::size_t offsets[] = {0, 1};

std::mt19937_64 generator_for(std::size_t n, std::size_t offset, std::uint64_t kernel)
{
    return std::mt19937_64(1000003 * kernel + 101 * n + offset);
}

// A copy of values placed `offset` elements into a NaN-filled buffer, so that
// the kernel sees a pointer `offset` elements past an aligned start.
template <class T>
std::vector<T> shifted(const std::vector<T>& values, std::size_t offset)
{
    std::vector<T> buffer = nan_vector<T>(values.size() + offset);
    std::copy(values.begin(), values.end(), buffer.begin() + static_cast<std::ptrdiff_t>(offset));
    return buffer;
}

template <class T>
std::vector<T> unshifted(const std::vector<T>& buffer, std::size_t offset)
{
    return std::vector<T>(buffer.begin() + static_cast<std::ptrdiff_t>(offset), buffer.end());
}

// Random values in [-1, 1) with exact zeros moved away, so that the side of
// the ReLU every element falls on is never in doubt.
template <class T>
std::vector<T> nonzero_vector(std::size_t n, std::mt19937_64& generator)
{
    std::vector<T> values = random_vector<T>(n, generator);
    for (T& value : values) {
        if (value == T(0)) value = T(0.5);
    }
    return values;
}

// Sums and products are rounded once, in the kernel as in the reference.
template <class T>
constexpr T exact = T(0);

// One rounding of the fused multiply-add against two in the reference: the
// results differ by at most about one unit of the product plus one of the
// sum, for values of magnitude at most one.
template <class T>
const T fused_tolerance = T(2) * std::numeric_limits<T>::epsilon();

} // namespace

// A two-input kernel (add, subtract) against its reference: into a separate
// output and in place over either input.
template <class T, class Kernel, class Reference>
void check_two_inputs(Kernel kernel, Reference reference, std::uint64_t seed)
{
    for (std::size_t n : lengths) {
        for (std::size_t offset : offsets) {
            CAPTURE(n);
            CAPTURE(offset);
            auto generator = generator_for(n, offset, seed);
            const auto x = random_vector<T>(n, generator);
            const auto y = random_vector<T>(n, generator);
            const auto expected = reference(x, y);

            const auto x_buffer = shifted(x, offset);
            const auto y_buffer = shifted(y, offset);
            auto out = nan_vector<T>(n + offset);
            kernel(n, x_buffer.data() + offset, y_buffer.data() + offset, out.data() + offset);
            check_close(unshifted(out, offset), expected, exact<T>);

            auto into_x = shifted(x, offset);
            kernel(n, into_x.data() + offset, y_buffer.data() + offset, into_x.data() + offset);
            check_close(unshifted(into_x, offset), expected, exact<T>);

            auto into_y = shifted(y, offset);
            kernel(n, x_buffer.data() + offset, into_y.data() + offset, into_y.data() + offset);
            check_close(unshifted(into_y, offset), expected, exact<T>);
        }
    }
}

TEST_CASE_TEMPLATE("add matches the reference", T, float, double)
{
    check_two_inputs<T>(petra::kernels::add<T>, petra::reference::add<T>, 1);
}

TEST_CASE_TEMPLATE("subtract matches the reference", T, float, double)
{
    check_two_inputs<T>(petra::kernels::subtract<T>, petra::reference::subtract<T>, 6);
}

TEST_CASE_TEMPLATE("axpy matches the reference", T, float, double)
{
    for (std::size_t n : lengths) {
        for (std::size_t offset : offsets) {
            CAPTURE(n);
            CAPTURE(offset);
            auto generator = generator_for(n, offset, 2);
            const T alpha = random_vector<T>(1, generator, T(-2), T(2))[0];
            const auto x = random_vector<T>(n, generator);
            const auto y = random_vector<T>(n, generator);

            const auto x_buffer = shifted(x, offset);
            auto y_buffer = shifted(y, offset);
            petra::kernels::axpy(n, alpha, x_buffer.data() + offset, y_buffer.data() + offset);
            check_close(unshifted(y_buffer, offset), petra::reference::axpy(alpha, x, y), fused_tolerance<T>);

            // x and y the same array: y becomes y + alpha * y.
            auto both = shifted(y, offset);
            petra::kernels::axpy(n, alpha, both.data() + offset, both.data() + offset);
            check_close(unshifted(both, offset), petra::reference::axpy(alpha, y, y), fused_tolerance<T>);
        }
    }
}

// A one-input kernel (scale, relu_forward) against its reference: into a
// separate output and in place. setup(n, generator) returns the input, the
// kernel to call as kernel(n, in, out), and the expected result.
template <class T, class Setup>
void check_one_input(std::uint64_t seed, Setup setup)
{
    for (std::size_t n : lengths) {
        for (std::size_t offset : offsets) {
            CAPTURE(n);
            CAPTURE(offset);
            auto generator = generator_for(n, offset, seed);
            const auto [x, kernel, expected] = setup(n, generator);

            const auto x_buffer = shifted(x, offset);
            auto out = nan_vector<T>(n + offset);
            kernel(n, x_buffer.data() + offset, out.data() + offset);
            check_close(unshifted(out, offset), expected, exact<T>);

            auto in_place = shifted(x, offset);
            kernel(n, in_place.data() + offset, in_place.data() + offset);
            check_close(unshifted(in_place, offset), expected, exact<T>);
        }
    }
}

TEST_CASE_TEMPLATE("scale matches the reference", T, float, double)
{
    check_one_input<T>(3, [](std::size_t n, std::mt19937_64& generator) {
        const T alpha = random_vector<T>(1, generator, T(-2), T(2))[0];
        const auto x = random_vector<T>(n, generator);
        auto kernel = [alpha](std::size_t count, const T* in, T* out) { petra::kernels::scale(count, alpha, in, out); };
        return std::tuple{x, kernel, petra::reference::scale(alpha, x)};
    });
}

TEST_CASE_TEMPLATE("relu_forward matches the reference", T, float, double)
{
    check_one_input<T>(4, [](std::size_t n, std::mt19937_64& generator) {
        const auto x = nonzero_vector<T>(n, generator);
        auto kernel = [](std::size_t count, const T* in, T* out) { petra::kernels::relu_forward(count, in, out); };
        return std::tuple{x, kernel, petra::reference::relu_forward(x)};
    });
}

TEST_CASE_TEMPLATE("relu_backward matches the reference", T, float, double)
{
    for (std::size_t n : lengths) {
        for (std::size_t offset : offsets) {
            CAPTURE(n);
            CAPTURE(offset);
            auto generator = generator_for(n, offset, 5);
            const auto x = nonzero_vector<T>(n, generator);
            const auto grad_y = random_vector<T>(n, generator);
            const auto expected = petra::reference::relu_backward(x, grad_y);

            const auto x_buffer = shifted(x, offset);
            const auto grad_y_buffer = shifted(grad_y, offset);
            auto grad_x = nan_vector<T>(n + offset);
            petra::kernels::relu_backward(n, x_buffer.data() + offset, grad_y_buffer.data() + offset,
                                          grad_x.data() + offset);
            check_close(unshifted(grad_x, offset), expected, exact<T>);

            // The ReLU's output selects the same elements as its input.
            const auto y_buffer = shifted(petra::reference::relu_forward(x), offset);
            grad_x = nan_vector<T>(n + offset);
            petra::kernels::relu_backward(n, y_buffer.data() + offset, grad_y_buffer.data() + offset,
                                          grad_x.data() + offset);
            check_close(unshifted(grad_x, offset), expected, exact<T>);

            auto into_grad_y = shifted(grad_y, offset);
            petra::kernels::relu_backward(n, x_buffer.data() + offset, into_grad_y.data() + offset,
                                          into_grad_y.data() + offset);
            check_close(unshifted(into_grad_y, offset), expected, exact<T>);

            auto into_x = shifted(x, offset);
            petra::kernels::relu_backward(n, into_x.data() + offset, grad_y_buffer.data() + offset,
                                          into_x.data() + offset);
            check_close(unshifted(into_x, offset), expected, exact<T>);
        }
    }
}

TEST_CASE_TEMPLATE("relu_backward gives exactly 0 where the input is not positive, whatever grad_y holds", T, float,
                   double)
{
    // Long enough to cover the vector loop and the scalar tail.
    const std::size_t n = 2 * petra::kernels::simd_width<T> + 3;
    const T infinity = std::numeric_limits<T>::infinity();
    const T nan = std::numeric_limits<T>::quiet_NaN();
    std::vector<T> x(n), grad_y(n);
    for (std::size_t i = 0; i < n; ++i) {
        // Alternately blocked (x <= 0) and passed (x > 0), with 0 itself among
        // the blocked ones.
        x[i] = i % 2 == 0 ? (i % 4 == 0 ? T(0) : T(-1.5)) : T(2);
        grad_y[i] = i % 3 == 0 ? nan : (i % 3 == 1 ? infinity : T(3));
    }
    auto grad_x = nan_vector<T>(n);
    petra::kernels::relu_backward(n, x.data(), grad_y.data(), grad_x.data());
    for (std::size_t i = 0; i < n; ++i) {
        CAPTURE(i);
        if (x[i] > T(0)) {
            CHECK((std::isnan(grad_y[i]) ? std::isnan(grad_x[i]) : grad_x[i] == grad_y[i]));
        } else {
            CHECK(grad_x[i] == T(0));
        }
    }
}

TEST_CASE_TEMPLATE("relu_forward propagates NaN and maps -0 to +0", T, float, double)
{
    const std::size_t n = 2 * petra::kernels::simd_width<T> + 3;
    std::vector<T> x(n, T(-0.0));
    x[1] = std::numeric_limits<T>::quiet_NaN();     // in the vector loop
    x[n - 1] = std::numeric_limits<T>::quiet_NaN(); // in the scalar tail
    auto out = nan_vector<T>(n);
    petra::kernels::relu_forward(n, x.data(), out.data());
    for (std::size_t i = 0; i < n; ++i) {
        CAPTURE(i);
        if (std::isnan(x[i])) {
            CHECK(std::isnan(out[i]));
        } else {
            CHECK(out[i] == T(0));
            CHECK_FALSE(std::signbit(out[i]));
        }
    }
}

TEST_CASE_TEMPLATE("element-wise kernels write nothing when n is 0", T, float, double)
{
    const std::vector<T> input{T(1)};
    auto out = nan_vector<T>(1);
    petra::kernels::add(0, input.data(), input.data(), out.data());
    petra::kernels::axpy(0, T(2), input.data(), out.data());
    petra::kernels::scale(0, T(2), input.data(), out.data());
    petra::kernels::relu_forward(0, input.data(), out.data());
    petra::kernels::relu_backward(0, input.data(), input.data(), out.data());
    CHECK(std::isnan(out[0]));
}
