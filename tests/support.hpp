// Helpers shared by the tests: seeded random data, NaN-poisoned outputs and
// comparisons with error bounds that fit the value type.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <filesystem>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <unistd.h>

#include <doctest/doctest.h>

#include <petra/batch_view.hpp>

namespace petra::test {

// A path in the temporary directory, unique to this process, for a file a
// test writes (and removes).
inline std::string temporary_path(const std::string& name)
{
    return (std::filesystem::temp_directory_path() / ("petra_test_" + std::to_string(::getpid()) + "_" + name))
        .string();
}

// Uniform values in [low, high) from a generator seeded by the caller, so that
// every failure is reproducible.
template <class T>
std::vector<T> random_vector(std::size_t count, std::mt19937_64& generator, T low = T(-1), T high = T(1))
{
    std::uniform_real_distribution<T> distribution(low, high);
    std::vector<T> values(count);
    for (auto& value : values) value = distribution(generator);
    return values;
}

// Output buffers start as NaN, so that an element a kernel forgets to write
// fails the comparison.
template <class T>
std::vector<T> nan_vector(std::size_t count)
{
    return std::vector<T>(count, std::numeric_limits<T>::quiet_NaN());
}

// Relative tolerance for a result accumulated over `terms` products of values
// of magnitude about one: a few units of rounding per term, in the spirit of
// the classical error bound of a dot product.
template <class T>
T accumulation_tolerance(std::size_t terms)
{
    return T(4) * std::numeric_limits<T>::epsilon() * static_cast<T>(std::max<std::size_t>(terms, 1));
}

// Checks |actual - expected| <= tolerance * scale elementwise, where scale is
// max(1, the largest |expected|), and reports the first offending index. NaN
// anywhere fails.
template <class T>
void check_close(std::span<const T> actual, std::span<const T> expected, T tolerance)
{
    REQUIRE(actual.size() == expected.size());
    T scale = T(1);
    for (T value : expected) scale = std::max(scale, std::abs(value));
    for (std::size_t i = 0; i < actual.size(); ++i) {
        const T error = std::abs(actual[i] - expected[i]);
        if (!(error <= tolerance * scale)) {
            INFO("index " << i << ": actual " << actual[i] << ", expected " << expected[i] << ", tolerance "
                          << tolerance * scale);
            CHECK(error <= tolerance * scale);
            return;
        }
    }
}

template <class T>
void check_close(const std::vector<T>& actual, const std::vector<T>& expected, T tolerance)
{
    check_close(std::span<const T>(actual), std::span<const T>(expected), tolerance);
}

// norm(a - b) / norm(b), accumulated in double: how far a whole array is
// from its expected value.
template <class T>
double relative_distance(std::span<const T> actual, std::span<const T> expected)
{
    REQUIRE(actual.size() == expected.size());
    double difference = 0.0, norm = 0.0;
    for (std::size_t i = 0; i < actual.size(); ++i) {
        const double error = double(actual[i]) - double(expected[i]);
        difference += error * error;
        norm += double(expected[i]) * double(expected[i]);
    }
    return std::sqrt(difference / norm);
}

template <class T>
double relative_distance(const std::vector<T>& actual, const std::vector<T>& expected)
{
    return relative_distance(std::span<const T>(actual), std::span<const T>(expected));
}

// A test's vectors as the layer and block floors take them: the first Count
// values as a span of static extent, or batch examples of Shape as a view.
template <std::size_t Count, class T>
std::span<T, Count> span_of(std::vector<T>& values)
{
    REQUIRE(values.size() >= Count);
    return std::span<T, Count>(values.data(), Count);
}
template <std::size_t Count, class T>
std::span<const T, Count> span_of(const std::vector<T>& values)
{
    REQUIRE(values.size() >= Count);
    return std::span<const T, Count>(values.data(), Count);
}
template <class Shape, class T>
petra::batch_view<T, Shape> batch_of(std::vector<T>& values, std::size_t batch)
{
    REQUIRE(values.size() >= batch * Shape::size);
    return {values.data(), batch};
}
template <class Shape, class T>
petra::batch_view<const T, Shape> batch_of(const std::vector<T>& values, std::size_t batch)
{
    REQUIRE(values.size() >= batch * Shape::size);
    return {values.data(), batch};
}

} // namespace petra::test
