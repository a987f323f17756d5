// Per-channel statistics of a batch in NCHW layout, as batch normalisation
// needs them: N examples, C channels, S = H * W positions per channel, element
// (n, c, s) at x[(n * C + c) * S + s]. Every (n, c) pair owns one contiguous
// "row" of S values, and channel c gathers the N rows n * C + c.
//
// Accumulation: each row is summed in T with two independent vector
// accumulators (and a scalar for its last S % simd_width<T> values), and the
// row partials of a channel are then added, still as vectors, in T. So no
// chain of additions is longer than about S / (2 * simd_width<T>) + N, which
// keeps float accurate for the sizes a network meets (S up to a few thousand,
// N up to a few hundred) without paying for double accumulators, which would
// halve the vector width.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <type_traits>

#include <xsimd/xsimd.hpp>

#include <petra/error.hpp>
#include <petra/kernels/cache_sizes.hpp>
#include <petra/kernels/profile.hpp>
#include <petra/kernels/simd.hpp>

namespace petra::kernels {

// Where a kernel that can compute the batch statistics of its output (the
// convolutions' forward, convolution.hpp) writes them: mean[c] and the biased
// variance[c] of each output channel c over the batch and the positions, as
// channel_mean_variance defines them. A default-constructed value asks for
// none and converts to false.
template <class T>
struct channel_statistics {
    T* mean = nullptr;
    T* variance = nullptr;
    constexpr explicit operator bool() const noexcept { return mean != nullptr; }
};

namespace detail {

// How the profile records of the per-channel kernels (here and in
// normalization.hpp) read their sizes (see kernels/profile.hpp).
inline constexpr const char* channel_geometry = "%zu x %zu channels x %zu positions";

// Sum of every lane of every accumulator.
template <class T, std::size_t Count>
T horizontal_sum(const simd<T> (&accumulator)[Count])
{
    simd<T> combined = accumulator[0];
    for (std::size_t a = 1; a < Count; ++a) combined += accumulator[a];
    return lane_sum(combined);
}

// Channels whose sums channel_chunk_sums keeps at once.
inline constexpr std::size_t channel_chunk = 32;

// Per-channel sums over a batch read in memory order: image by image, and
// within an image the rows of channels [c0, c0 + count) one after another,
// which are contiguous. Reading one channel's rows across the images
// instead jumps C * S values between rows of S, and ran up to 1.5 times
// slower on the reference network's shapes when the batch came from memory
// (bench/RESULTS.md). A row is summed on two vector accumulators, which take
// its vectors in turn, and added as vectors to its channel's pair; the S %
// width values at each row's end go to a scalar of the channel; total() adds
// the lanes and the scalar. The order of the additions is fixed by N, C, S
// and the vector width alone.
template <class T>
struct channel_chunk_sums {
    using vector = simd<T>;
    struct channel {
        vector lanes[2];
        T tail;
    };
    channel sums[channel_chunk];
    std::size_t count;

    explicit channel_chunk_sums(std::size_t channels) : count(channels)
    {
        for (std::size_t k = 0; k < count; ++k) sums[k] = {{vector(T(0)), vector(T(0))}, T(0)};
    }

    // sum of channel c0 + k = step(k, sum, value) over its values, from 0;
    // step works on vectors and on scalars.
    template <class Step>
    void accumulate(std::size_t N, std::size_t C, std::size_t S, const T* x, std::size_t c0, Step&& step)
    {
        constexpr std::size_t width = vector::size;
        const std::size_t vector_end = S - S % width;
        const std::size_t pair_end = vector_end - vector_end % (2 * width);
        for (std::size_t n = 0; n < N; ++n) {
            for (std::size_t k = 0; k < count; ++k) {
                const T* row = x + (n * C + c0 + k) * S;
                vector first(T(0)), second(T(0));
                std::size_t s = 0;
                for (; s < pair_end; s += 2 * width) {
                    first = step(k, first, vector::load_unaligned(row + s));
                    second = step(k, second, vector::load_unaligned(row + s + width));
                }
                if (s < vector_end) first = step(k, first, vector::load_unaligned(row + s));
                for (s = vector_end; s < S; ++s) sums[k].tail = step(k, sums[k].tail, row[s]);
                sums[k].lanes[0] += first;
                sums[k].lanes[1] += second;
            }
        }
    }

    T total(std::size_t k) const { return horizontal_sum(sums[k].lanes) + sums[k].tail; }
};

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
    for (std::size_t c0 = 0; c0 < C; c0 += detail::channel_chunk) {
        detail::channel_chunk_sums<T> sums(std::min(detail::channel_chunk, C - c0));
        sums.accumulate(N, C, S, x, c0, [](std::size_t, auto total, auto value) { return total + value; });
        for (std::size_t k = 0; k < sums.count; ++k) sum_out[c0 + k] = sums.total(k);
    }
}

namespace detail {

// The bytes of x (per chunk of channels) whose statistics
// mean_variance_groups computes in two passes before merging them into
// the batch's: a unit of the order of its additions, so a constant, the
// same on every machine; half of the smallest L2 cache met (1 MiB, the Zen
// 4 and Zen 5 cores'), where the second pass finds the values. Merging
// smaller units costs time (a horizontal sum and two divisions per channel
// and unit): on a Zen 5 core units of 64 KiB made the reference network's
// stride-2 forwards with their statistics 2-5% slower alone.
inline constexpr std::size_t mean_variance_unit_bytes = std::size_t(512) << 10;

// channel_mean_variance's computation for channels [c0, c0 + channels) of
// a batch of N images of C channels of S values (N * S > 0; channels at most
// channel_chunk). Its values come in units of images (as many as
// hold at most mean_variance_unit_bytes of those channels, at least one):
// each unit's sums, then their squared deviations from the unit's means,
// merged in order into the batch's. The caller adds the images in order,
// in groups of `group()` (a multiple of the unit holding at most
// group_bytes of those channels where units allow), each group as soon as
// it is written (the direct convolutions add each group of their output
// while it is in the core's cache), then takes the results (finish). The
// bits follow the units, not the groups, nor the caches the groups are
// drawn from. With more than one unit, every value is taken less its
// channel's first value (the shift), so that the units' means, whose
// differences the merge squares, carry rounding errors of the size of the
// spread, not of the mean; a single unit is the plain two passes.
template <class T>
class mean_variance_groups {
public:
    mean_variance_groups(std::size_t N, std::size_t C, std::size_t S, std::size_t c0, std::size_t channels,
                         std::size_t group_bytes)
        : N_(N), C_(C), S_(S), c0_(c0), channels_(channels), unit_(images_within(mean_variance_unit_bytes)),
          group_(std::max(unit_, images_within(group_bytes) / unit_ * unit_)), shifted_(unit_ < N)
    {}

    std::size_t group() const { return group_; }

    // Images [first, first + images) (a whole group, the last possibly
    // shorter), x pointing at image first, one unit after the other.
    void add(std::size_t first, std::size_t images, const T* x)
    {
        for (std::size_t i = 0; i < images; i += unit_) {
            const std::size_t count = std::min(unit_, images - i);
            if (shifted_) {
                add_unit<true>(first + i, count, x + i * C_ * S_);
            } else {
                add_unit<false>(first + i, count, x + i * C_ * S_);
            }
        }
    }

    void finish(T* mean_out, T* variance_out) const
    {
        const T count = static_cast<T>(N_ * S_);
        for (std::size_t k = 0; k < channels_; ++k) {
            mean_out[c0_ + k] = shift_[k] + sum_[k] / count;
            variance_out[c0_ + k] = deviations_[k] / count;
        }
    }

private:
    std::size_t images_within(std::size_t bytes) const
    {
        return std::clamp<std::size_t>(bytes / (channels_ * S_ * sizeof(T)), 1, N_);
    }

    // Images [first, first + images) of the batch, at images_x: their sums,
    // then their squared deviations from their means (read again from the
    // core's caches), merged into those of the images before them.
    template <bool Shifted>
    void add_unit(std::size_t first, std::size_t images, const T* images_x)
    {
        const std::size_t C = C_, S = S_, c0 = c0_, channels = channels_;
        if (first == 0) {
            for (std::size_t k = 0; k < channels; ++k) shift_[k] = Shifted ? images_x[(c0 + k) * S] : T(0);
        }
        const auto shifted = [&]([[maybe_unused]] std::size_t k, auto value) {
            if constexpr (Shifted) return value - decltype(value)(shift_[k]);
            else return value;
        };
        channel_chunk_sums<T> sums(channels);
        sums.accumulate(images, C, S, images_x, c0,
                        [&shifted](std::size_t k, auto total, auto value) { return total + shifted(k, value); });
        const T count_before = T(first * S), count_here = T(images * S);
        T unit_mean[channel_chunk];
        for (std::size_t k = 0; k < channels; ++k) unit_mean[k] = sums.total(k) / count_here;
        channel_chunk_sums<T> squares(channels);
        squares.accumulate(images, C, S, images_x, c0, [&](std::size_t k, auto total, auto value) {
            const auto deviation = shifted(k, value) - decltype(value)(unit_mean[k]);
            return xsimd::fma(deviation, deviation, total);
        });
        for (std::size_t k = 0; k < channels; ++k) {
            const T unit_sum = sums.total(k), unit_deviations = squares.total(k);
            if (first == 0) {
                sum_[k] = unit_sum;
                deviations_[k] = unit_deviations;
                continue;
            }
            const T difference = unit_mean[k] - sum_[k] / count_before;
            deviations_[k] +=
                unit_deviations + difference * difference * (count_before * count_here / (count_before + count_here));
            sum_[k] += unit_sum;
        }
    }

    std::size_t N_, C_, S_, c0_, channels_, unit_, group_;
    bool shifted_;
    T shift_[channel_chunk], sum_[channel_chunk], deviations_[channel_chunk];
};

// The bytes of x a group of images of channel_mean_variance holds at most
// (per chunk of channels): half of the L2 cache the kernels block for (the
// values do not depend on it: mean_variance_groups).
inline std::size_t mean_variance_group_bytes() { return blocking_caches().l2 / 2; }

// channel_mean_variance's computation, its groups of images holding at most
// group_bytes of x per chunk of channels (at least one image): N * S > 0.
template <class T>
void grouped_mean_variance(std::size_t N, std::size_t C, std::size_t S, const T* x, T* mean_out, T* variance_out,
                           std::size_t group_bytes)
{
    for (std::size_t c0 = 0; c0 < C; c0 += channel_chunk) {
        mean_variance_groups<T> groups(N, C, S, c0, std::min(channel_chunk, C - c0), group_bytes);
        for (std::size_t first = 0; first < N; first += groups.group()) {
            groups.add(first, std::min(groups.group(), N - first), x + first * C * S);
        }
        groups.finish(mean_out, variance_out);
    }
}

} // namespace detail

// For each channel c in [0, C), with count = N * S:
//   mean_out[c]     = (1 / count) * sum of x over the channel,
//   variance_out[c] = (1 / count) * sum of (x - mean_out[c])^2 over it,
// the biased variance batch normalisation normalises with. Never computed
// as E[x^2] - E[x]^2: that one-pass formula cancels catastrophically when
// the mean is large against the spread (float values 1000 +- 1 lose every
// digit of the variance). Instead the batch is taken in units of images
// holding mean_variance_unit_bytes, each in two passes: its channels' sums,
// then their squared deviations from the unit's means, read again from the
// core's caches; the units are then merged in order by the exact identity
// for two sets a and b of na and nb values:
//   deviations(a + b) = deviations(a) + deviations(b)
//                       + (mean(b) - mean(a))^2 * na * nb / (na + nb),
// sums of nonnegative terms that do not cancel, so the error stays within a
// few units of rounding per accumulated term, as with two passes over the
// whole batch; but x comes from beyond L2 once, not twice. A training
// step's activations at 28x28 do not fit L2: on an Intel Xeon core, which
// reads about 26 GB/s from its L3, the statistics of the reference
// network's 28x28 activations took 1.41 ms per step in groups of images
// (half of L2, merged group by group) instead of 1.83 in two passes over
// the batch. Throws std::invalid_argument when count == 0, since an empty
// set has no mean; nothing is written then. The outputs must not overlap x
// or each other.
template <class T>
void channel_mean_variance(std::size_t N, std::size_t C, std::size_t S, const T* x, T* mean_out, T* variance_out)
{
    static_assert(std::is_floating_point_v<T>, "channel_mean_variance is defined for float and double");
    // Per element an addition (mean pass), a subtraction and a multiply-add
    // (deviation pass); x read once from memory (and once more from L2),
    // 2 C values written.
    PETRA_PROFILE_KERNEL("channel_mean_variance", detail::channel_geometry, {N, C, S}, 4.0 * double(N * C * S),
                         double((N * C * S + 2 * C) * sizeof(T)));
    if (N == 0 || S == 0) {
        raise_error(error_kind::invalid_argument,
                    "petra::kernels::channel_mean_variance: the batch holds no element per channel (N = " +
                        std::to_string(N) + ", S = " + std::to_string(S) + "), so mean and variance are undefined");
    }
    detail::grouped_mean_variance(N, C, S, x, mean_out, variance_out, detail::mean_variance_group_bytes());
}

} // namespace petra::kernels
