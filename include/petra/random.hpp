// petra's samplers: everything petra draws from a seed (initial weights,
// data order, augmentation, generated data) goes through these functions,
// so that a seed gives the same run on every standard library and compiler.
//
// Why: the engines std::mt19937_64 and std::mt19937 are specified to the bit
// by the standard, but std::normal_distribution, std::uniform_int_distribution,
// std::uniform_real_distribution, std::bernoulli_distribution and
// std::shuffle are not: libstdc++, libc++ and MSVC's library turn the same
// engine output into different values. petra keeps the engine and specifies
// the rest here, precisely enough to re-implement in another language.
//
// Every sampler takes a 64-bit engine (min() == 0, max() == 2^64 - 1, e.g.
// std::mt19937_64) and reads whole outputs g() in the order written below.
// Floating-point steps are IEEE operations only (+, -, *, /, sqrt and
// std::fma, all correctly rounded), written so that no compiler may fuse a
// multiply and an add on its own (-ffp-contract): every multiply-add that
// exists is an explicit std::fma. Hence no libm function whose rounding
// varies between C libraries (log, sin, cos) is used; natural_log below is
// petra's own.
//
// The samplers, with x = g() (an unsigned 64-bit integer):
// - uniform_bits<24>: x >> 40, the top 24 bits; uniform_bits<53>: x >> 11.
// - uniform_float(g) = (x >> 40) * 2^-24, in [0, 1), exact in float.
//   uniform_double(g) = (x >> 11) * 2^-53, in [0, 1), exact in double.
// - uniform_real<T>(g, low, high) = fma(high - low, u, low) with u =
//   uniform_float(g) for T = float and uniform_double(g) for T = double
//   (high - low rounded in T first); in [low, high], high only by rounding.
// - uniform_below(g, n), n >= 1: unbiased integer in [0, n) by rejection:
//   threshold = (2^64 - n) mod n (computed as (0 - n) % n in unsigned 64-bit
//   arithmetic); draw x until x >= threshold; return x mod n. One draw
//   unless x < threshold (probability below n / 2^64).
// - uniform_int(g, low, high), low <= high, signed or unsigned: low +
//   uniform_below(g, high - low + 1), the difference taken in unsigned
//   64-bit arithmetic; when high - low + 1 wraps to 0 (the full 64-bit
//   range) the result is low + x for a single draw.
// - coin(g): true when the top bit of x is set (x >> 63 == 1): one draw.
// - standard_normal_pair(g): the polar method (Marsaglia). Repeat: u = 2 *
//   uniform_double(g) - 1, then v = 2 * uniform_double(g) - 1 (u drawn
//   first; both exact), s = fma(u, u, v * v); until 0 < s < 1. Then f =
//   sqrt(-2 * natural_log(s) / s) and the pair is (u * f, v * f), in that
//   order, two independent standard normal values.
// - fill_normal(values, mean, deviation, g): values in index order, two at
//   a time from one standard_normal_pair each, (z0, z1) -> values[i],
//   values[i + 1]; an odd last value takes z0 of one more pair (its z1 is
//   discarded). Each value is T(fma(deviation, z, mean)), computed in
//   double and rounded once to T.
// - standard_normal(g): z0 of one standard_normal_pair (z1 discarded).
// - shuffle(first, last, g): Fisher-Yates from the last index down: for i
//   = n - 1 down to 1, j = uniform_below(g, i + 1), swap(a[i], a[j]) (also
//   when j == i). n - 1 draws of uniform_below, none when n < 2.
// - natural_log(s), 0 < s finite, double: s = m * 2^e with m in [sqrt(1/2),
//   sqrt(2)) (std::frexp, exact, then one doubling if m < sqrt(1/2)); with
//   t = (m - 1) / (m + 1) and w = t * t, log m = 2t + t * w * P(w), P(w) =
//   sum_{k=0..10} 2 / (2k + 3) * w^k evaluated by Horner with std::fma from
//   the highest term down; log s = fma(e, ln2_high, fma(e, ln2_low, log m))
//   with ln2_high = 0x1.62e42fefa3800p-1 and ln2_low = 0x1.ef35793c76730p-45.
//   Within a few units in the last place of the true logarithm; what
//   matters here is that it is the same everywhere.
#pragma once

#include <array>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <random>
#include <span>
#include <type_traits>
#include <utility>

namespace petra {

// An engine whose every output is 64 uniform bits, like std::mt19937_64.
template <class Generator>
concept bits64_generator = (std::uniform_random_bit_generator<Generator> &&
                            std::same_as<typename Generator::result_type, std::uint64_t> && (Generator::min() == 0) &&
                            (Generator::max() == std::numeric_limits<std::uint64_t>::max()));

template <int Bits, bits64_generator Generator>
std::uint64_t uniform_bits(Generator& generator)
{
    static_assert(Bits >= 1 && Bits <= 64, "uniform_bits takes 1 to 64 bits of one output.");
    return std::uint64_t(generator()) >> (64 - Bits);
}

template <bits64_generator Generator>
float uniform_float(Generator& generator)
{
    return static_cast<float>(uniform_bits<24>(generator)) * 0x1p-24f;
}

template <bits64_generator Generator>
double uniform_double(Generator& generator)
{
    return static_cast<double>(uniform_bits<53>(generator)) * 0x1p-53;
}

template <class T, bits64_generator Generator>
T uniform_real(Generator& generator, T low, T high)
{
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "uniform_real draws float or double.");
    const T width = high - low;
    if constexpr (std::is_same_v<T, float>) {
        return std::fma(width, uniform_float(generator), low);
    } else {
        return std::fma(width, uniform_double(generator), low);
    }
}

template <bits64_generator Generator>
std::uint64_t uniform_below(Generator& generator, std::uint64_t count)
{
    const std::uint64_t threshold = (std::uint64_t(0) - count) % count;
    for (;;) {
        const std::uint64_t x = generator();
        if (x >= threshold) return x % count;
    }
}

template <std::integral Integer, bits64_generator Generator>
Integer uniform_int(Generator& generator, Integer low, Integer high)
{
    const std::uint64_t span = std::uint64_t(high) - std::uint64_t(low) + 1; // modulo 2^64
    const std::uint64_t offset = span == 0 ? std::uint64_t(generator()) : uniform_below(generator, span);
    return static_cast<Integer>(std::uint64_t(low) + offset);
}

template <bits64_generator Generator>
bool coin(Generator& generator)
{
    return (std::uint64_t(generator()) >> 63) != 0;
}

inline double natural_log(double s)
{
    int exponent = 0;
    double mantissa = std::frexp(s, &exponent); // in [1/2, 1)
    if (mantissa < 0x1.6a09e667f3bcdp-1) {      // sqrt(1/2)
        mantissa *= 2.0;
        exponent -= 1;
    }
    const double t = (mantissa - 1.0) / (mantissa + 1.0);
    const double w = t * t;
    double series = 2.0 / 23.0;
    for (int k = 9; k >= 0; --k) series = std::fma(series, w, 2.0 / double(2 * k + 3));
    const double log_mantissa = std::fma(t * w, series, 2.0 * t);
    const double e = double(exponent);
    return std::fma(e, 0x1.62e42fefa3800p-1, std::fma(e, 0x1.ef35793c76730p-45, log_mantissa));
}

template <bits64_generator Generator>
std::array<double, 2> standard_normal_pair(Generator& generator)
{
    for (;;) {
        const double u = 2.0 * uniform_double(generator) - 1.0;
        const double v = 2.0 * uniform_double(generator) - 1.0;
        const double s = std::fma(u, u, v * v);
        if (s > 0.0 && s < 1.0) {
            const double factor = std::sqrt(-2.0 * natural_log(s) / s);
            return {u * factor, v * factor};
        }
    }
}

template <bits64_generator Generator>
double standard_normal(Generator& generator)
{
    return standard_normal_pair(generator)[0];
}

template <class T, bits64_generator Generator>
void fill_normal(std::span<T> values, double mean, double deviation, Generator& generator)
{
    for (std::size_t i = 0; i < values.size(); i += 2) {
        const std::array<double, 2> pair = standard_normal_pair(generator);
        values[i] = static_cast<T>(std::fma(deviation, pair[0], mean));
        if (i + 1 < values.size()) values[i + 1] = static_cast<T>(std::fma(deviation, pair[1], mean));
    }
}

template <std::random_access_iterator Iterator, bits64_generator Generator>
void shuffle(Iterator first, Iterator last, Generator& generator)
{
    const auto count = static_cast<std::uint64_t>(last - first);
    for (std::uint64_t i = count; i > 1; --i) {
        const std::uint64_t j = uniform_below(generator, i);
        using std::swap;
        swap(first[std::ptrdiff_t(i - 1)], first[std::ptrdiff_t(j)]);
    }
}

} // namespace petra
