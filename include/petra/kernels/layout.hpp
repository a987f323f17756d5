// Moving values between layouts inside the kernels: channel rows to pixel
// rows (the transposition the convolutions use to put channels along the
// vectors and back), a row's store that accumulates onto what is there, and
// the prefetches that bring a kernel's next images closer while it works.
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <type_traits>

// The x86 float vectors the code below addresses with intrinsics: AVX-512,
// or AVX2 with FMA (the map's multiply-add fused, as channel_affine_relu
// rounds it). Where they exist, float_block holds their register blocks
// for the transpositions, and first_lanes, load_lanes and store_lanes their
// masked first lanes (mask registers on AVX-512, vector masks on AVX2), so
// that a row's tail and a vector's part are stored through a mask, not
// copied through the stack (through the stack, g++ 12 kept a register
// block's accumulators there during its whole loop over taps: the AVX2 3x3
// stride-2 forward's last rows ran at a third of the speed of the others).
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#define PETRA_X86_FLOAT_VECTORS 1
#include <immintrin.h>
#endif

#include <petra/kernels/input_map.hpp>
#include <petra/kernels/simd.hpp>

namespace petra::kernels::detail {

#if defined(__AVX512F__)
// The 16 x 16 block of floats held in r (r[i] lane j is element (i, j))
// transposed in place: afterwards r[j] lane i is element (i, j).
PETRA_ALWAYS_INLINE void transpose_16x16(__m512 (&r)[16])
{
    // Interleave pairs of rows, then pairs of pairs within each 128-bit
    // lane, then 128-bit lanes twice. (The masked forms with every lane
    // selected are the plain instructions; the unmasked intrinsics pass an
    // undefined vector that g++ 12 reports as maybe uninitialised.)
    constexpr __mmask16 all = 0xFFFF;
    __m512 t[16];
    PETRA_UNROLL(16)
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_mask_unpacklo_ps(r[i], all, r[i], r[i + 1]);
        t[i + 1] = _mm512_mask_unpackhi_ps(r[i], all, r[i], r[i + 1]);
    }
    PETRA_UNROLL(16)
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_mask_shuffle_ps(t[i], all, t[i], t[i + 2], 0x44);
        r[i + 1] = _mm512_mask_shuffle_ps(t[i], all, t[i], t[i + 2], 0xEE);
        r[i + 2] = _mm512_mask_shuffle_ps(t[i], all, t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm512_mask_shuffle_ps(t[i], all, t[i + 1], t[i + 3], 0xEE);
    }
    PETRA_UNROLL(4)
    for (int i = 0; i < 4; ++i) {
        t[i] = _mm512_mask_shuffle_f32x4(r[i], all, r[i], r[i + 4], 0x88);
        t[i + 4] = _mm512_mask_shuffle_f32x4(r[i], all, r[i], r[i + 4], 0xDD);
        t[i + 8] = _mm512_mask_shuffle_f32x4(r[i], all, r[i + 8], r[i + 12], 0x88);
        t[i + 12] = _mm512_mask_shuffle_f32x4(r[i], all, r[i + 8], r[i + 12], 0xDD);
    }
    PETRA_UNROLL(8)
    for (int i = 0; i < 8; ++i) {
        r[i] = _mm512_mask_shuffle_f32x4(t[i], all, t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_mask_shuffle_f32x4(t[i], all, t[i], t[i + 8], 0xDD);
    }
}
#endif

#if defined(PETRA_X86_FLOAT_VECTORS) && !defined(__AVX512F__)
// The 8 x 8 block of floats held in r (r[i] lane j is element (i, j))
// transposed in place: afterwards r[j] lane i is element (i, j). Pairs of
// rows interleaved, then pairs of pairs within each 128-bit lane, then the
// 128-bit lanes exchanged.
PETRA_ALWAYS_INLINE void transpose_8x8(__m256 (&r)[8])
{
    __m256 t[8];
    PETRA_UNROLL(8)
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    __m256 s[8];
    PETRA_UNROLL(8)
    for (int i = 0; i < 8; i += 4) {
        s[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);     // columns 0 and 4 of rows i to i + 3
        s[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE); // columns 1 and 5
        s[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        s[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    PETRA_UNROLL(4)
    for (int i = 0; i < 4; ++i) {
        r[i] = _mm256_permute2f128_ps(s[i], s[i + 4], 0x20);
        r[i + 4] = _mm256_permute2f128_ps(s[i], s[i + 4], 0x31);
    }
}
#endif

// The square blocks of floats transpose_channels_to_rows_as moves through
// registers: 16 x 16 on AVX-512, 8 x 8 on AVX2 with FMA; none elsewhere.
// Each gives its side (size), a row's load and store, the block's
// transposition in place, and the map's values of a vector (affine_relu:
// NaN kept, -0 to 0).
#if defined(__AVX512F__)
struct float_block {
    using vector = __m512;
    static constexpr std::size_t size = 16;
    static PETRA_ALWAYS_INLINE vector load(const float* at) { return _mm512_loadu_ps(at); }
    static PETRA_ALWAYS_INLINE void store(float* at, vector values) { _mm512_storeu_ps(at, values); }
    static PETRA_ALWAYS_INLINE void transpose(vector (&rows)[size]) { transpose_16x16(rows); }
    static PETRA_ALWAYS_INLINE vector affine_relu(vector scale, vector value, vector shift)
    {
        const vector affine = _mm512_fmadd_ps(scale, value, shift);
        return _mm512_maskz_mov_ps(_mm512_mask_cmp_ps_mask(0xFFFF, affine, _mm512_setzero_ps(), _CMP_NLE_UQ), affine);
    }
};
#elif defined(PETRA_X86_FLOAT_VECTORS)
struct float_block {
    using vector = __m256;
    static constexpr std::size_t size = 8;
    static PETRA_ALWAYS_INLINE vector load(const float* at) { return _mm256_loadu_ps(at); }
    static PETRA_ALWAYS_INLINE void store(float* at, vector values) { _mm256_storeu_ps(at, values); }
    static PETRA_ALWAYS_INLINE void transpose(vector (&rows)[size]) { transpose_8x8(rows); }
    static PETRA_ALWAYS_INLINE vector affine_relu(vector scale, vector value, vector shift)
    {
        const vector affine = _mm256_fmadd_ps(scale, value, shift);
        return _mm256_and_ps(_mm256_cmp_ps(affine, _mm256_setzero_ps(), _CMP_NLE_UQ), affine);
    }
};
#endif

#if defined(__AVX512F__)
// The mask of the first `count` lanes (all 16 from 16 on).
PETRA_ALWAYS_INLINE __mmask16 first_lanes(std::size_t count)
{
    return static_cast<__mmask16>(count >= 16 ? 0xFFFFu : (1u << count) - 1u);
}

// The lanes of mask at in, the others zero.
PETRA_ALWAYS_INLINE __m512 load_lanes(const float* in, __mmask16 mask) { return _mm512_maskz_loadu_ps(mask, in); }

// The lanes of mask at out = values + beta * out (out not read when beta ==
// 0), one fused multiply-add each: every masked store of the row stores below.
PETRA_ALWAYS_INLINE void store_lanes(float* out, __mmask16 mask, __m512 values, float beta)
{
    if (beta != 0.0f) values = _mm512_fmadd_ps(_mm512_set1_ps(beta), _mm512_maskz_loadu_ps(mask, out), values);
    _mm512_mask_storeu_ps(out, mask, values);
}
#elif defined(PETRA_X86_FLOAT_VECTORS)
// The same on AVX2: masks are vectors whose lanes are all ones or zeros.
PETRA_ALWAYS_INLINE __m256i first_lanes(std::size_t count)
{
    const int lanes = static_cast<int>(std::min<std::size_t>(count, 8));
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(lanes), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

PETRA_ALWAYS_INLINE __m256 load_lanes(const float* in, __m256i mask) { return _mm256_maskload_ps(in, mask); }

PETRA_ALWAYS_INLINE void store_lanes(float* out, __m256i mask, __m256 values, float beta)
{
    if (beta != 0.0f) values = _mm256_fmadd_ps(_mm256_set1_ps(beta), _mm256_maskload_ps(out, mask), values);
    _mm256_maskstore_ps(out, mask, values);
}
#endif

// Pixel p of a transposition's result, for pixels laid out in rows of
// row_width pixels: pixel p starts at (p / row_width) * row_pitch + (p %
// row_width) * stride values from the result's start, so that the rows of an
// image can land in a buffer with a border or a padded row length.
struct pixel_rows {
    std::size_t row_width; // pixels per row (at least 1)
    std::size_t row_pitch; // values from one row's start to the next's
    std::size_t stride;    // values from one pixel's channels to the next's
};

// to[place(p) + c] = from[c * from_stride + p] for c < channels and p <
// pixels, where place(p) is where rows puts pixel p: a block of channel rows
// turned into pixel rows. On AVX-512, float blocks of 16 x 16 go through
// registers (about 0.4 instructions per value instead of a load and a
// store), on AVX2 blocks of 8 x 8 (float_block), whichever rows their
// pixels fall on; the rest is copied value by value. Putting each pixel in
// its place here, rather than transposing to a compact temporary and
// copying its rows out, saves a pass over every value (the Winograd
// kernels alone ran 2 to 10% faster; bench/RESULTS.md).
// With a map (input_map.hpp), to[place(p) + c] = map(c, from[c * from_stride
// + p]) instead, the map applied while the values are in registers. (Each
// form is compiled apart, Mapped a constant: with the map's test in its
// loop, the Winograd input gradients, which take no map, ran 7% slower on
// an Intel Xeon, 5.2 ms per exact step at 16 channels against 4.8.)
template <bool Mapped, class T>
void transpose_channels_to_rows_as(const T* from, std::size_t from_stride, std::size_t channels, std::size_t pixels,
                                   T* to, const pixel_rows& rows, affine_relu_map<T> map)
{
    std::size_t full_channels = 0, full_pixels = 0;
#if defined(PETRA_X86_FLOAT_VECTORS)
    if constexpr (std::is_same_v<T, float>) {
        using block = float_block;
        constexpr std::size_t size = block::size;
        full_channels = channels - channels % size;
        full_pixels = pixels - pixels % size;
        for (std::size_t p0 = 0; p0 < full_pixels; p0 += size) {
            // The block's pixels' places, walking along their rows.
            std::size_t offsets[size];
            std::size_t row = p0 / rows.row_width, column = p0 % rows.row_width;
            PETRA_UNROLL(16)
            for (std::size_t k = 0; k < size; ++k) {
                offsets[k] = row * rows.row_pitch + column * rows.stride;
                if (++column == rows.row_width) column = 0, ++row;
            }
            for (std::size_t c0 = 0; c0 < full_channels; c0 += size) {
                typename block::vector r[size];
                PETRA_UNROLL(16)
                for (std::size_t i = 0; i < size; ++i) r[i] = block::load(from + (c0 + i) * from_stride + p0);
                block::transpose(r);
                if constexpr (Mapped) {
                    // Each pixel's channels: the map's multiply-add with
                    // the channels' scales and shifts as vectors, then the
                    // lanes not above zero zeroed (NaN kept), as
                    // affine_relu_map rounds it.
                    const auto scale = block::load(map.scale + c0), shift = block::load(map.shift + c0);
                    PETRA_UNROLL(16)
                    for (std::size_t k = 0; k < size; ++k) r[k] = block::affine_relu(scale, r[k], shift);
                }
                PETRA_UNROLL(16)
                for (std::size_t k = 0; k < size; ++k) block::store(to + offsets[k] + c0, r[k]);
            }
        }
    }
#endif
    // The rest value by value: the pixels past the blocks in the blocks'
    // channels, then every pixel of the other channels. (Where the blocks
    // took every pixel, the first loop has nothing to do and is skipped: a
    // Winograd convolution's results return to NCHW as one "channel" per
    // pixel, and walking those 784 or 196 channels, a division each, took
    // 40% and 28% of that transposition at 28x28 x 16 and 14x14 x 32
    // channels on a Zen 5 core: 1.58 and 0.66 us an image, now 0.93 and
    // 0.48, one image in L1, 2026-12-04.)
    const auto copy_pixels = [&](std::size_t first_channel, std::size_t end_channel, std::size_t first_pixel) {
        const std::size_t first_row = first_pixel / rows.row_width, first_column = first_pixel % rows.row_width;
        for (std::size_t c = first_channel; c < end_channel; ++c) {
            std::size_t row = first_row, column = first_column;
            for (std::size_t p = first_pixel; p < pixels; ++p) {
                const T value = from[c * from_stride + p];
                if constexpr (Mapped) {
                    to[row * rows.row_pitch + column * rows.stride + c] = map(c, value);
                } else {
                    to[row * rows.row_pitch + column * rows.stride + c] = value;
                }
                if (++column == rows.row_width) column = 0, ++row;
            }
        }
    };
    if (full_pixels < pixels) copy_pixels(0, full_channels, full_pixels);
    copy_pixels(full_channels, channels, 0);
}

template <class T>
void transpose_channels_to_rows(const T* from, std::size_t from_stride, std::size_t channels, std::size_t pixels, T* to,
                                const pixel_rows& rows, affine_relu_map<T> map = {})
{
    if (map) {
        transpose_channels_to_rows_as<true>(from, from_stride, channels, pixels, to, rows, map);
    } else {
        transpose_channels_to_rows_as<false>(from, from_stride, channels, pixels, to, rows, map);
    }
}

// to[p * to_stride + c] = from[c * from_stride + p] for c < channels and
// p < pixels (transpose_channels_to_rows with all pixels on one row).
template <class T>
void transpose_channels(const T* from, std::size_t from_stride, std::size_t channels, std::size_t pixels, T* to,
                        std::size_t to_stride)
{
    transpose_channels_to_rows(from, from_stride, channels, pixels, to,
                               pixel_rows{std::max<std::size_t>(pixels, 1), pixels * to_stride, to_stride});
}

// out[t] = in[t] + beta * out[t] for t < count (out not read when beta == 0),
// in whole vectors, with the tail (fewer than a vector) as one masked vector
// where there are masked lanes (float on AVX-512 and AVX2) and value by value
// elsewhere: tiles are stored in pieces of a row, most of them shorter than a
// vector or two.
template <class T>
PETRA_ALWAYS_INLINE void store_row(std::size_t count, const T* in, T* out, T beta)
{
    using vector = simd<T>;
    const std::size_t vector_end = count - count % vector::size; // see detail::map in elementwise.hpp
    std::size_t t = 0;
    if (beta == T(0)) {
        for (; t < vector_end; t += vector::size) vector::load_unaligned(in + t).store_unaligned(out + t);
    } else {
        const vector scale(beta);
        for (; t < vector_end; t += vector::size) {
            fused_multiply_add(scale, vector::load_unaligned(out + t), vector::load_unaligned(in + t))
                .store_unaligned(out + t);
        }
    }
    if (t == count) return;
#if defined(PETRA_X86_FLOAT_VECTORS)
    if constexpr (std::is_same_v<T, float>) {
        const auto tail = first_lanes(count - t);
        store_lanes(out + t, tail, load_lanes(in + t, tail), beta);
        return;
    }
#endif
    if (beta == T(0)) {
        for (; t < count; ++t) out[t] = in[t];
    } else {
        for (; t < count; ++t) out[t] = xsimd::fma(beta, out[t], in[t]);
    }
}

// One vector of results, count <= simd_width of them, stored at out with
// beta (store_row's masked form for a part).
template <class T>
PETRA_ALWAYS_INLINE void store_vector(const simd<T>& values, std::size_t count, T* out, T beta)
{
    if (count == simd_width<T>) {
        if (beta == T(0)) {
            values.store_unaligned(out);
        } else {
            fused_multiply_add(simd<T>(beta), simd<T>::load_unaligned(out), values).store_unaligned(out);
        }
        return;
    }
#if defined(PETRA_X86_FLOAT_VECTORS)
    if constexpr (std::is_same_v<T, float>) {
        store_lanes(out, first_lanes(count), values, beta);
        return;
    }
#endif
    alignas(buffer_alignment) T lanes[simd_width<T>];
    values.store_aligned(lanes);
    store_row(count, lanes, out, beta);
}

// The first count <= simd_width values at in as a vector, its other lanes
// zero, reading nothing past in + count: a masked load on AVX-512, a copy
// through the stack elsewhere.
template <class T>
PETRA_ALWAYS_INLINE simd<T> load_first(const T* in, std::size_t count)
{
    if (count == simd_width<T>) return simd<T>::load_unaligned(in);
#if defined(__AVX512F__)
    if constexpr (std::is_same_v<T, float>) {
        return _mm512_maskz_loadu_ps(first_lanes(count), in);
    } else if constexpr (std::is_same_v<T, double>) {
        return _mm512_maskz_loadu_pd(static_cast<__mmask8>((1u << count) - 1u), in);
    }
#endif
    alignas(buffer_alignment) T lanes[simd_width<T>] = {};
    std::copy(in, in + count, lanes);
    return simd<T>::load_aligned(lanes);
}

// out[2 t] = in[t] + beta * out[2 t] for t < count (not read when beta ==
// 0), the odd positions left as they are: a phase row of a stride-2 input
// gradient stored into its image row. On AVX-512, float values go 16 at a
// time, spread over two vectors by a permutation and stored through a mask of
// the even lanes (a third of the scalar stores' time on the reference
// network's downsamplings); elsewhere value by value.
template <class T>
PETRA_ALWAYS_INLINE void store_row_stride_two(std::size_t count, const T* in, T* out, T beta)
{
    std::size_t t = 0;
#if defined(__AVX512F__)
    if constexpr (std::is_same_v<T, float>) {
        // Lanes 2k and 2k + 1 of a half take value k of that half; only the
        // even lanes are stored.
        const __m512i first_half = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
        const __m512i second_half = _mm512_set_epi32(15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8, 8);
        const auto even_lanes = [](std::size_t values) {
            return static_cast<__mmask16>(0x5555u & ((1u << (2 * values)) - 1u));
        };
        for (; t < count; t += 16) {
            const std::size_t values = std::min<std::size_t>(16, count - t);
            const __m512 v = _mm512_maskz_loadu_ps(first_lanes(values), in + t);
            const std::size_t first = std::min<std::size_t>(values, 8), second = values - first;
            // (The masked form with every lane selected: the unmasked
            // intrinsic passes an undefined vector that g++ 12 reports as
            // maybe uninitialised, as in transpose_16x16.)
            store_lanes(out + 2 * t, even_lanes(first), _mm512_mask_permutexvar_ps(v, 0xFFFF, first_half, v), beta);
            if (second != 0) {
                store_lanes(out + 2 * t + 16, even_lanes(second), _mm512_mask_permutexvar_ps(v, 0xFFFF, second_half, v),
                            beta);
            }
        }
        return;
    }
#endif
    for (; t < count; ++t) {
        T& target = out[2 * t];
        target = beta == T(0) ? in[t] : in[t] + beta * target;
    }
}

// out[2 t] = even[t] + beta * out[2 t] and out[2 t + 1] = odd[t] + beta *
// out[2 t + 1] for t < count (out not read when beta == 0): the two phase
// columns of a stride-2 input gradient's row, stored as one image row in a
// single pass. On AVX-512, float values go 16 pairs at a time, interleaved
// by two permutations into two whole vectors (the tail through masks);
// elsewhere value by value. Each value is rounded as store_row_stride_two
// rounds it (one fused multiply-add where beta != 0).
template <class T>
PETRA_ALWAYS_INLINE void store_row_interleaved(std::size_t count, const T* even, const T* odd, T* out, T beta)
{
    std::size_t t = 0;
#if defined(__AVX512F__)
    if constexpr (std::is_same_v<T, float>) {
        // Lane 2k takes even's value k, lane 2k + 1 odd's (index 16 + k).
        const __m512i low_pairs = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
        const __m512i high_pairs = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
        for (; t < count; t += 16) {
            const std::size_t pairs = std::min<std::size_t>(16, count - t);
            const __m512 e = _mm512_maskz_loadu_ps(first_lanes(pairs), even + t);
            const __m512 o = _mm512_maskz_loadu_ps(first_lanes(pairs), odd + t);
            store_lanes(out + 2 * t, first_lanes(2 * pairs), _mm512_permutex2var_ps(e, low_pairs, o), beta);
            if (pairs > 8) {
                store_lanes(out + 2 * t + 16, first_lanes(2 * (pairs - 8)), _mm512_permutex2var_ps(e, high_pairs, o),
                            beta);
            }
        }
        return;
    }
#endif
    for (; t < count; ++t) {
        T& even_target = out[2 * t];
        T& odd_target = out[2 * t + 1];
        even_target = beta == T(0) ? even[t] : even[t] + beta * even_target;
        odd_target = beta == T(0) ? odd[t] : odd[t] + beta * odd_target;
    }
}

#if defined(__AVX512F__)
// A short row copied into a row with zeros around it, every target value
// written once: lane c < lanes of the target holds in[step * c + first] where
// that position lies in [0, count), zero elsewhere, for targets of at most 16
// floats read from rows of at most 32 (fits). The permutation and masks are
// built once per shape; each row then takes two masked loads, one
// permutation and one masked store. The phased copies of the direct
// convolutions write their rows so (step 2: a phase column of a padded
// stride-2 input; step 1: the output gradient shifted by its border):
// zeroing every plane first and then copying each row's values beside its
// border (a memset, then a copy or a split per row) took 1.8 to 2.3 times as
// long for the reference network's downsamplings' inputs (Zen 5, the copy
// alone with its input in cache; bench/RESULTS.md).
struct padded_row_gather {
    __m512i index;
    __mmask16 valid, low, high, lanes;

    static constexpr bool fits(std::size_t lanes, std::size_t count) { return lanes <= 16 && count <= 32; }

    padded_row_gather(std::size_t target_lanes, std::size_t step, std::ptrdiff_t first, std::size_t count)
        : low(first_lanes(count)), high(first_lanes(count > 16 ? count - 16 : 0)), lanes(first_lanes(target_lanes))
    {
        alignas(64) int positions[16] = {};
        unsigned mask = 0;
        for (std::size_t c = 0; c < target_lanes; ++c) {
            const std::ptrdiff_t x = static_cast<std::ptrdiff_t>(step * c) + first;
            if (x < 0 || x >= static_cast<std::ptrdiff_t>(count)) continue;
            positions[c] = static_cast<int>(x);
            mask |= 1u << c;
        }
        index = _mm512_load_si512(positions);
        valid = static_cast<__mmask16>(mask);
    }

    void operator()(const float* in, float* out) const
    {
        const __m512 first_half = _mm512_maskz_loadu_ps(low, in);
        const __m512 second_half = _mm512_maskz_loadu_ps(high, in + 16);
        _mm512_mask_storeu_ps(out, lanes, _mm512_maskz_permutex2var_ps(valid, first_half, index, second_half));
    }

    // A target row of zeros only (its source row lies in the border).
    void zero(float* out) const { _mm512_mask_storeu_ps(out, lanes, _mm512_setzero_ps()); }
};
#endif

// even[t] = in[2 t] and odd[t] = in[2 t + 1] for the count values of in
// (even gets (count + 1) / 2 values, odd count / 2); a null target is not
// written: a row of a stride-2 input split into its two phase columns. On
// AVX-512, float values go 32 at a time, two vectors gathered into their
// even and odd lanes by two permutations (the scalar copies took a fifth of
// a stride-2 3x3 convolution's time on the reference network); elsewhere
// value by value.
template <class T>
PETRA_ALWAYS_INLINE void split_row_stride_two(std::size_t count, const T* in, T* even, T* odd)
{
    std::size_t t = 0;
#if defined(__AVX512F__)
    if constexpr (std::is_same_v<T, float>) {
        const __m512i even_lanes = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
        const __m512i odd_lanes = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
        for (; t < count; t += 32) {
            const std::size_t values = std::min<std::size_t>(32, count - t);
            const __m512 low = _mm512_maskz_loadu_ps(first_lanes(values), in + t);
            const __m512 high = _mm512_maskz_loadu_ps(first_lanes(values > 16 ? values - 16 : 0), in + t + 16);
            if (even != nullptr) {
                _mm512_mask_storeu_ps(even + t / 2, first_lanes((values + 1) / 2),
                                      _mm512_permutex2var_ps(low, even_lanes, high));
            }
            if (odd != nullptr) {
                _mm512_mask_storeu_ps(odd + t / 2, first_lanes(values / 2),
                                      _mm512_permutex2var_ps(low, odd_lanes, high));
            }
        }
        return;
    }
#endif
    for (; 2 * t < count; ++t) {
        if (even != nullptr) even[t] = in[2 * t];
        if (odd != nullptr && 2 * t + 1 < count) odd[t] = in[2 * t + 1];
    }
}

// Brings a kernel's next images toward the L2 cache while it works on the ones
// before: `calls` calls of advance() each ask for an equal share of the range's
// cache lines (prefetches to L2, which do not fault), so that the copies
// reading the images find them closer than memory: in a training step a
// convolution's input was written passes before and comes from L3 or memory.
// Its users: the Winograd forward and input gradient over their products
// (winograd.hpp; on an Intel Xeon core, about 26 GB/s from its L3, 2-5% off
// those convolutions in a step, medians of alternated pairs; nothing measurable
// on a Zen 5 core), the direct weight gradient before each tap pass
// (convolution.hpp), the bf16 correlation and the 1x1 and 3x3 stride-2
// forwards' matrix products, one call (at once) per image
// (convolution_bf16.hpp, pointwise.hpp; the forwards 1.07-1.21x and 1.02-1.05x
// in a Zen 5 step). Spread over the Winograd weight gradient's blocks (few and
// long, so in bursts of hundreds of lines) it slowed that kernel on the Intel
// core and changed a Zen 5 step by nothing measurable (bench/RESULTS.md), so
// that kernel does without.
class prefetch_stream {
public:
    prefetch_stream(std::span<const std::byte> range, std::size_t calls)
        : next_(range.data()), end_(range.data() + range.size()),
          lines_per_call_(calls == 0 ? 0 : (range.size() / line + calls) / calls)
    {}
    void advance()
    {
        for (std::size_t k = 0; k < lines_per_call_ && next_ < end_; ++k, next_ += line)
            __builtin_prefetch(next_, 0, 2);
    }

private:
    static constexpr std::size_t line = 64;
    const std::byte* next_;
    const std::byte* end_;
    std::size_t lines_per_call_;
};

// The bytes of `count` images of `image_values` values each from image
// `first` of `values`.
template <class T>
std::span<const std::byte> images_bytes(const T* values, std::size_t image_values, std::size_t first, std::size_t count)
{
    return std::as_bytes(std::span<const T>(values + first * image_values, count * image_values));
}

} // namespace petra::kernels::detail
