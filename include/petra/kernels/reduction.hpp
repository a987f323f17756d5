// Per-channel statistics of a batch in NCHW layout, as batch normalisation
// needs them: N examples, C channels, S = H * W positions per channel, element
// (n, c, s) at x[(n * C + c) * S + s]. Every (n, c) pair owns one contiguous
// "row" of S values, and channel c gathers the N rows n * C + c.
//
// Accumulation: each row is summed in T with several independent vector
// accumulators, and the N row partials of a channel are then added in T. So no
// chain of additions is longer than about S / (4 * simd_width<T>) + N, which
// keeps float accurate for the sizes a network meets (S up to a few thousand,
// N up to a few hundred) without paying for double accumulators, which would
// halve the vector width.
#pragma once

#include <cstddef>
#include <string>
#include <type_traits>

#include <xsimd/xsimd.hpp>

#include <petra/error.hpp>
#include <petra/kernels/profile.hpp>
#include <petra/kernels/simd.hpp>

namespace petra::kernels {

namespace detail {

// How the profile records of the per-channel kernels (here and in
// normalization.hpp) read their sizes (see kernels/profile.hpp).
inline constexpr const char* channel_geometry = "%zu x %zu channels x %zu positions";

// Independent accumulators per row: enough to hide the latency of a vector
// add, few enough to leave registers to the caller.
inline constexpr std::size_t reduction_accumulators = 4;

// Sum of every lane of every accumulator.
template <class T, std::size_t Count>
T horizontal_sum(const simd<T> (&accumulator)[Count])
{
    simd<T> combined = accumulator[0];
    for (std::size_t a = 1; a < Count; ++a) combined += accumulator[a];
    return lane_sum(combined);
}

// Folds row[0 .. S) into a sum: total = step(total, row[s]) from total = 0,
// on reduction_accumulators independent vectors, then on scalars for the
// last S % simd_width<T> elements. step must work on vectors and on scalars.
template <class T, class Step>
T row_accumulate(std::size_t S, const T* row, Step&& step)
{
    using vector = simd<T>;
    constexpr std::size_t width = vector::size;
    constexpr std::size_t block = reduction_accumulators * width;
    vector accumulator[reduction_accumulators];
    for (auto& partial : accumulator) partial = vector(T(0));
    std::size_t s = 0;
    // Bounds written as S - S % step, not s + step <= S: see detail::map in
    // elementwise.hpp.
    for (; s < S - S % block; s += block) {
#pragma GCC unroll 4
        for (std::size_t a = 0; a < reduction_accumulators; ++a) {
            accumulator[a] = step(accumulator[a], vector::load_unaligned(row + s + a * width));
        }
    }
    for (; s < S - S % width; s += width) accumulator[0] = step(accumulator[0], vector::load_unaligned(row + s));
    T total = detail::horizontal_sum(accumulator);
    for (; s < S; ++s) total = step(total, row[s]);
    return total;
}

// Sum of row[0 .. S).
template <class T>
T row_sum(std::size_t S, const T* row)
{
    return row_accumulate(S, row, [](auto total, auto value) { return total + value; });
}

// Sum of (row[s] - mean)^2 over s in [0, S).
template <class T>
T row_squared_deviation_sum(std::size_t S, const T* row, T mean)
{
    return row_accumulate(S, row, [mean](auto total, auto value) {
        const auto deviation = value - decltype(value)(mean);
        return xsimd::fma(deviation, deviation, total);
    });
}

} // namespace detail

// sum_out[c] = sum over n in [0, N) and s in [0, S) of x[(n * C + c) * S + s],
// for c in [0, C). With N * S == 0 every sum is 0 and x is not read. sum_out
// must not overlap x.
template <class T>
void channel_sum(std::size_t N, std::size_t C, std::size_t S, const T* x, T* sum_out)
{
    static_assert(std::is_floating_point_v<T>, "channel_sum is defined for float and double");
    // One addition per element; x read once, C sums written.
    PETRA_PROFILE_KERNEL("channel_sum", detail::channel_geometry, {N, C, S}, double(N * C * S),
                         double((N * C * S + C) * sizeof(T)));
    for (std::size_t c = 0; c < C; ++c) {
        T total = T(0);
        for (std::size_t n = 0; n < N; ++n) total += detail::row_sum(S, x + (n * C + c) * S);
        sum_out[c] = total;
    }
}

// For each channel c in [0, C), with count = N * S:
//   mean_out[c]     = (1 / count) * sum of x over the channel,
//   variance_out[c] = (1 / count) * sum of (x - mean_out[c])^2 over it,
// the biased variance batch normalisation normalises with. The variance is
// computed in two passes, mean first, then squared deviations from it, never
// as E[x^2] - E[x]^2: that one-pass formula cancels catastrophically when the
// mean is large against the spread (float values 1000 +- 1 lose every digit of
// the variance), while the two-pass error stays within a few units of rounding
// per accumulated term. Throws std::invalid_argument when count == 0, since an
// empty set has no mean; nothing is written then. The outputs must not
// overlap x or each other.
template <class T>
void channel_mean_variance(std::size_t N, std::size_t C, std::size_t S, const T* x, T* mean_out, T* variance_out)
{
    static_assert(std::is_floating_point_v<T>, "channel_mean_variance is defined for float and double");
    // Per element an addition (mean pass), a subtraction and a multiply-add
    // (deviation pass); x read twice, 2 C values written.
    PETRA_PROFILE_KERNEL("channel_mean_variance", detail::channel_geometry, {N, C, S}, 4.0 * double(N * C * S),
                         double((2 * N * C * S + 2 * C) * sizeof(T)));
    if (N == 0 || S == 0) {
        raise_error(error_kind::invalid_argument,
                    "petra::kernels::channel_mean_variance: the batch holds no element per channel (N = " +
                        std::to_string(N) + ", S = " + std::to_string(S) + "), so mean and variance are undefined");
    }
    const T count = static_cast<T>(N * S);
    for (std::size_t c = 0; c < C; ++c) {
        T total = T(0);
        for (std::size_t n = 0; n < N; ++n) total += detail::row_sum(S, x + (n * C + c) * S);
        const T mean = total / count;
        T squared_deviations = T(0);
        for (std::size_t n = 0; n < N; ++n) {
            squared_deviations += detail::row_squared_deviation_sum(S, x + (n * C + c) * S, mean);
        }
        mean_out[c] = mean;
        variance_out[c] = squared_deviations / count;
    }
}

} // namespace petra::kernels
