// A convolution's three kernels in bf16, on AMX tiles or with vdpbf16ps
// (the two engines of bf16.hpp), each as its float counterpart
// (convolution.hpp) computes it with the operands rounded to bf16
// (round_to_bf16) and the products summed in float, for every shape the
// float kernels take (kernel 1x1 or 3x3, stride 1 or 2, zero padding); the
// input gradient is the forward correlation of the output gradient
// (dilated for stride 2) with flipped weights. The engines sum in
// different orders: their results may differ in the last bits, each held
// to float accumulation of the rounded values (test_convolution_bf16).
// The second piece of the opt-in bf16 precision (bf16.hpp has the first);
// conv2d takes it under precision::bf16 (layers/conv2d.hpp).
//
// No im2col matrix, as in the float direct form (convolution.hpp): each
// image is copied once, rounded, into phase planes in which the two values
// of a pair of input channels sit side by side (pair p of pixel i at
// 2 (p * pair_stride + i)). A tile of 16 such pairs (one per row) by 16
// pixels is then, for any tap, 16 rows of 64 consecutive bytes a plane
// apart: tdpbf16ps's right operand, loaded in place at the tap's origin, as
// the float kernels load their slices. Its left operand is the tap's
// weights, out channels by the chunk's input channels. Each tap and chunk
// of 32 input channels adds one product per tile of 16 out channels by 16
// (wide) pixels; a block of 32 by 32 results stays in four tile registers
// over every tap and chunk and goes to the output row by row. Pixels are
// indexed over the phase plane's width, as in the float direct form: the
// columns past the output width are computed and not stored.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include <petra/error.hpp>
#include <petra/kernels/bf16.hpp>
#include <petra/kernels/convolution.hpp>
#include <petra/kernels/input_map.hpp>
#include <petra/kernels/layout.hpp>
#include <petra/kernels/profile.hpp>
#include <petra/kernels/scratch.hpp>

namespace petra::kernels {

namespace detail {

struct bf16_phased_image_tag {};
struct bf16_pair_row_tag {};
struct bf16_convolution_weights_tag {};
struct bf16_tap_origins_tag {};

// The sizes of one image's paired phase planes and of the packed weights.
struct bf16_convolution_geometry {
    static constexpr std::size_t tile_pixels = 16, tile_channels = 16, max_chunk_pairs = 16;
    std::size_t phases, height, width, plane; // per axis, and one phase plane's rows, columns, pixels
    std::size_t chunk_pairs, chunks;          // pairs of input channels per tile's depth, and chunks of them
    std::size_t pair_stride;                  // pixels from one pair's planes to the next's
    std::size_t image_pairs;                  // pairs of one image's planes, with the slack the tiles read
    std::size_t wide_pixels;                  // output rows times the plane's width
    std::size_t out_blocks;                   // tiles of 16 out channels
    std::size_t taps;                         // kernel * kernel

    constexpr explicit bf16_convolution_geometry(const convolution_shape& shape)
        : phases(phases_read(shape)), height(phase_height(shape)), width(phase_width(shape)), plane(height * width),
          chunk_pairs(std::min(max_chunk_pairs, (shape.in_channels + 1) / 2)),
          chunks(((shape.in_channels + 1) / 2 + chunk_pairs - 1) / chunk_pairs), pair_stride(phases * phases * plane),
          // A tile reads up to 31 pixels past the last wide pixel of a
          // tap's origin, which lies at most 2 rows and 2 columns into its
          // plane, and the weight gradient's gathers as far: zeros after
          // the last pair's planes, so that nothing read is undefined
          // (test_convolution_bf16 checks both bounds over 3000 shapes).
          image_pairs(chunks * chunk_pairs * pair_stride + 2 * width + 2 + 2 * tile_pixels),
          wide_pixels(shape.out_height() * width), out_blocks((shape.out_channels + tile_channels - 1) / tile_channels),
          taps(shape.kernel * shape.kernel)
    {}

    constexpr std::size_t weights_count() const { return taps * chunks * out_blocks * tile_channels * 2 * chunk_pairs; }
    // Where tap t's weights for chunk c and out block b begin: tile_channels
    // rows of 2 chunk_pairs values.
    constexpr std::size_t weights_at(std::size_t t, std::size_t c, std::size_t b) const
    {
        return ((t * chunks + c) * out_blocks + b) * tile_channels * 2 * chunk_pairs;
    }
};

// The weights as the tiles' left operands (bf16_convolution_geometry::
// weights_at), rounded: weight(co, ci, t) for out channel co, input channel
// ci and tap t of shape; zeros for the channels past the shape's.
template <class Weight>
void pack_bf16_convolution_weights(const convolution_shape& shape, const bf16_convolution_geometry& g, Weight&& weight,
                                   std::uint16_t* packed)
{
    const std::size_t row = 2 * g.chunk_pairs;
    for (std::size_t t = 0; t < g.taps; ++t) {
        for (std::size_t c = 0; c < g.chunks; ++c) {
            for (std::size_t b = 0; b < g.out_blocks; ++b) {
                std::uint16_t* out = packed + g.weights_at(t, c, b);
                for (std::size_t r = 0; r < g.tile_channels; ++r) {
                    const std::size_t co = b * g.tile_channels + r;
                    for (std::size_t k = 0; k < row; ++k) {
                        const std::size_t ci = c * row + k;
                        out[r * row + k] = co < shape.out_channels && ci < shape.in_channels
                                               ? round_to_bf16(weight(co, ci, t))
                                               : std::uint16_t(0);
                    }
                }
            }
        }
    }
}

// Where tap t reads, for wide pixel 0, within a pair's planes (or a
// channel's).
constexpr std::size_t bf16_tap_origin(const convolution_shape& shape, const bf16_convolution_geometry& g, std::size_t t)
{
    const std::size_t kh = t / shape.kernel, kw = t % shape.kernel;
    const std::size_t phase = (kh % shape.stride) * g.phases + kw % shape.stride;
    return phase * g.plane + (kh / shape.stride) * g.width + kw / shape.stride;
}

inline void bf16_tap_origins(const convolution_shape& shape, const bf16_convolution_geometry& g, std::size_t* origins)
{
    for (std::size_t t = 0; t < g.taps; ++t) origins[t] = bf16_tap_origin(shape, g, t);
}

struct bf16_gradient_rows_tag {};
struct bf16_pixel_pairs_tag {};
struct bf16_gradient_sums_tag {};

// The weight gradient's operands (bf16_weight_gradient_images): per image,
// the output gradient as rows of `depth` bf16 values (its wide pixels,
// zeros past the output width and the last pixel), and for each parity e
// the input's pixel pairs, row q holding, for every input channel c < 16
// in_blocks, the values of pixels 2 q + e and 2 q + e + 1 of c's phase
// planes side by side; sums: float, taps x 16 out_blocks x 16 in_blocks.
struct bf16_weight_gradient_geometry {
    bf16_convolution_geometry planes;
    std::size_t depth;       // wide pixels rounded up to 32, a tile's depth
    std::size_t in_blocks;   // tiles of 16 input channels
    std::size_t pixel_pairs; // rows of one parity's pairs: every pixel a tap's tiles read

    constexpr explicit bf16_weight_gradient_geometry(const convolution_shape& shape)
        : planes(shape), depth((planes.wide_pixels + 31) / 32 * 32), in_blocks((shape.in_channels + 15) / 16),
          pixel_pairs((largest_origin(shape, planes) + depth + 2) / 2)
    {}

    static constexpr std::size_t largest_origin(const convolution_shape& shape, const bf16_convolution_geometry& g)
    {
        std::size_t largest = 0;
        for (std::size_t t = 0; t < g.taps; ++t) largest = std::max(largest, bf16_tap_origin(shape, g, t));
        return largest;
    }
    constexpr std::size_t rows_count() const { return planes.out_blocks * 16 * depth; }
    constexpr std::size_t pairs_count() const { return 2 * pixel_pairs * in_blocks * 16; }
    constexpr std::size_t sums_count() const { return planes.taps * planes.out_blocks * 16 * in_blocks * 16; }
};

#if defined(PETRA_BF16_X86)

// The bf16 bits of the lanes of mask at values, each mapped by
// max(scale * v + shift, 0) first (affine_relu_map's rounding), zero
// elsewhere: bf16_row_bits of the mapped values.
PETRA_TARGET_AVX512_BF16 inline __m512i bf16_mapped_row_bits(const float* values, __mmask16 mask, float scale,
                                                             float shift)
{
    const __m512 affine =
        _mm512_fmadd_ps(_mm512_set1_ps(scale), _mm512_maskz_loadu_ps(mask, values), _mm512_set1_ps(shift));
    const __m512 mapped =
        _mm512_maskz_mov_ps(_mm512_mask_cmp_ps_mask(mask, affine, _mm512_setzero_ps(), _CMP_NLE_UQ), affine);
    const __m256bh rounded = _mm512_cvtneps_pbh(mapped);
    __m256i bits;
    std::memcpy(&bits, &rounded, sizeof(bits));
    return _mm512_maskz_cvtepu16_epi32(__mmask16(0xffff), bits);
}

// out[x] = the bf16 bits of even[x] and, above them, of odd[x] (zero where
// odd is null), for x < count; with a map, of the values mapped as channels
// `channel` (even) and `channel + 1` (odd).
PETRA_TARGET_AVX512_BF16 inline void bf16_pair_row(const float* even, const float* odd, std::size_t count,
                                                   std::uint32_t* out, affine_relu_map<float> map = {},
                                                   std::size_t channel = 0)
{
    for (std::size_t x = 0; x < count; x += 16) {
        const __mmask16 mask = bf16_first_lanes(count - x);
        const __mmask16 odd_mask = odd ? mask : __mmask16(0);
        const __m512i low = map ? bf16_mapped_row_bits(even + x, mask, map.scale[channel], map.shift[channel])
                                : bf16_row_bits(even + x, mask);
        const __m512i high =
            !odd  ? _mm512_setzero_si512()
            : map ? bf16_mapped_row_bits(odd + x, odd_mask, map.scale[channel + 1], map.shift[channel + 1])
                  : bf16_row_bits(odd + x, odd_mask);
        _mm512_mask_storeu_epi32(out + x, mask, _mm512_or_si512(low, _mm512_maskz_slli_epi32(mask, high, 16)));
    }
}

// Stores the lanes of values (pairs of input columns x0 .. x0 + 15, the
// first `count`) to their stride-2 phases' rows: phase_rows[a] receives the
// columns whose padded column x + padding has parity a, at column (x +
// padding) / 2, for a < phases.
PETRA_TARGET_AVX512_BF16 inline void split_pair_columns(__m512i values, std::size_t x0, std::size_t count,
                                                        std::size_t padding, std::size_t phases,
                                                        std::uint32_t* const (&phase_rows)[2])
{
    const __mmask16 valid = bf16_first_lanes(count);
    for (std::size_t a = 0; a < phases; ++a) {
        // Lanes l with (x0 + l + padding) % 2 == a; x0 is even.
        const std::size_t first = (a + 2 - padding % 2) % 2;
        const __mmask16 lanes = static_cast<__mmask16>((first == 0 ? 0x5555u : 0xaaaau) & valid);
        _mm512_mask_compressstoreu_epi32(phase_rows[a] + (x0 + first + padding) / 2, lanes, values);
    }
}

// One image's paired phase planes (see the top of this file): every input
// row's pairs at their phase, row and column; the values mapped by map
// where it is given. The borders and the slack are not written: the caller
// zeroes the planes once (every image writes the same places).
PETRA_TARGET_AVX512_BF16 inline void prepare_bf16_image(const convolution_shape& shape,
                                                        const bf16_convolution_geometry& g, const float* image,
                                                        std::uint32_t* phased, std::uint32_t* row_pairs,
                                                        affine_relu_map<float> map)
{
    const std::size_t pixels = shape.input_pixels(), stride = shape.stride, padding = shape.padding;
    for (std::size_t p = 0; p < (shape.in_channels + 1) / 2; ++p) {
        const float* even = image + 2 * p * pixels;
        const float* odd = 2 * p + 1 < shape.in_channels ? even + pixels : nullptr;
        std::uint32_t* planes = phased + p * g.pair_stride;
        for (std::size_t y = 0; y < shape.in_height; ++y) {
            const std::size_t padded_row = y + padding;
            if (padded_row % stride >= g.phases) continue;
            std::uint32_t* target = planes + (padded_row % stride) * g.phases * g.plane + padded_row / stride * g.width;
            const float* even_row = even + y * shape.in_width;
            const float* odd_row = odd ? odd + y * shape.in_width : nullptr;
            if (stride == 1) {
                bf16_pair_row(even_row, odd_row, shape.in_width, target + padding, map, 2 * p);
                continue;
            }
            bf16_pair_row(even_row, odd_row, shape.in_width, row_pairs, map, 2 * p);
            std::uint32_t* const phase_rows[2] = {target, g.phases > 1 ? target + g.plane : target};
            for (std::size_t x = 0; x < shape.in_width; x += 16) {
                const __m512i values = _mm512_maskz_loadu_epi32(bf16_first_lanes(shape.in_width - x), row_pairs + x);
                split_pair_columns(values, x, std::min<std::size_t>(16, shape.in_width - x), padding, g.phases,
                                   phase_rows);
            }
        }
    }
}

// A piece of an output row within a block of wide pixels: length values
// from the block's offset to the channel's output at `to`.
struct bf16_row_piece {
    std::size_t offset, to, length;
};

// out[piece.to + i] = values[piece.offset + i] + beta * out[...] for every
// piece and i < its length (out not read when beta == 0), a masked vector
// at a time.
PETRA_TARGET_AVX512_BF16 inline void store_bf16_block_row(const float* values, float* out, const bf16_row_piece* pieces,
                                                          std::size_t count, float beta)
{
    for (std::size_t k = 0; k < count; ++k) {
        const bf16_row_piece& piece = pieces[k];
        for (std::size_t i = 0; i < piece.length; i += 16) {
            const __mmask16 mask = bf16_first_lanes(piece.length - i);
            __m512 result = _mm512_maskz_loadu_ps(mask, values + piece.offset + i);
            float* target = out + piece.to + i;
            if (beta != 0.0f) {
                result = _mm512_fmadd_ps(_mm512_set1_ps(beta), _mm512_maskz_loadu_ps(mask, target), result);
            }
            _mm512_mask_storeu_ps(target, mask, result);
        }
    }
}

// The batch, image by image: its paired planes, then every block of 32 out
// channels by 32 wide pixels in tile registers 0 to 3 over every tap and
// chunk (4 and 5: the weights of two out blocks; 6 and 7: two tiles of
// pixels), stored to the output's rows. The tile configuration is loaded on
// entry and released on exit.
PETRA_TARGET_AMX inline void bf16_convolution_images(const convolution_shape& shape, const bf16_convolution_geometry& g,
                                                     const float* input, const std::uint16_t* weights,
                                                     const std::size_t* origins, float* output, float beta,
                                                     std::uint32_t* phased, std::uint32_t* row_pairs,
                                                     affine_relu_map<float> input_map)
{
    constexpr std::size_t block = 32;
    const std::size_t weight_row_bytes = 4 * g.chunk_pairs, pixel_row_bytes = 4 * g.pair_stride;
    const amx_tile_shapes shapes =
        amx_tile_shapes{}.set(0, 4, 16, 64).set(4, 6, 16, weight_row_bytes).set(6, 8, g.chunk_pairs, 64);
    _tile_loadconfig(&shapes);
    alignas(64) float results[block * block];
    const std::size_t out_width = shape.out_width(), out_pixels = shape.output_pixels();
    const std::size_t block_weights = g.tile_channels * 2 * g.chunk_pairs;
    const auto* pairs = reinterpret_cast<const std::uint16_t*>(phased);
    std::fill(phased, phased + g.image_pairs, 0u);
    for (std::size_t image = 0; image < shape.batch; ++image) {
        prepare_bf16_image(shape, g, input + image * shape.in_channels * shape.input_pixels(), phased, row_pairs,
                           input_map);
        float* out_image = output + image * shape.out_channels * out_pixels;
        for (std::size_t b = 0; b < g.out_blocks; b += 2) {
            const bool two_blocks = b + 1 < g.out_blocks;
            for (std::size_t j = 0; j < g.wide_pixels; j += block) {
                zero_block_tiles();
                for (std::size_t t = 0; t < g.taps; ++t) {
                    for (std::size_t c = 0; c < g.chunks; ++c) {
                        const std::uint16_t* w = weights + g.weights_at(t, c, b);
                        const std::uint16_t* x = pairs + 2 * (c * g.chunk_pairs * g.pair_stride + origins[t] + j);
                        _tile_loadd(4, w, weight_row_bytes);
                        _tile_loadd(6, x, pixel_row_bytes);
                        _tile_loadd(7, x + 2 * g.tile_pixels, pixel_row_bytes);
                        _tile_dpbf16ps(0, 4, 6);
                        _tile_dpbf16ps(1, 4, 7);
                        if (two_blocks) {
                            _tile_loadd(5, w + block_weights, weight_row_bytes);
                            _tile_dpbf16ps(2, 5, 6);
                            _tile_dpbf16ps(3, 5, 7);
                        }
                    }
                }
                store_block_tiles(results);
                const std::size_t channels =
                    std::min(two_blocks ? block : block / 2, shape.out_channels - b * g.tile_channels);
                const std::size_t columns = std::min(block, g.wide_pixels - j);
                // The block's pieces of output rows (at most 32 / width + 2),
                // then every channel's values through them.
                bf16_row_piece pieces[block + 2];
                std::size_t piece_count = 0;
                for_each_wide_row(g.width, j, columns,
                                  [&](std::size_t row, std::size_t column, std::size_t length, std::size_t offset) {
                                      if (column >= out_width) return;
                                      pieces[piece_count++] = {offset, row * out_width + column,
                                                               std::min(length, out_width - column)};
                                  });
                for (std::size_t r = 0; r < channels; ++r) {
                    store_bf16_block_row(results + r * block, out_image + (b * g.tile_channels + r) * out_pixels,
                                         pieces, piece_count, beta);
                }
            }
        }
    }
    _tile_release();
}

// The output gradient of one image as bf16 rows of g.depth values (see
// bf16_weight_gradient_geometry), zeros past the output width and depth.
PETRA_TARGET_AVX512_BF16 inline void prepare_bf16_gradient_rows(const convolution_shape& shape,
                                                                const bf16_weight_gradient_geometry& g,
                                                                const float* grad_y, std::uint16_t* rows)
{
    std::fill(rows, rows + g.rows_count(), std::uint16_t(0));
    const std::size_t out_width = shape.out_width();
    for (std::size_t co = 0; co < shape.out_channels; ++co) {
        for (std::size_t oh = 0; oh < shape.out_height(); ++oh) {
            const float* in = grad_y + (co * shape.out_height() + oh) * out_width;
            std::uint16_t* out = rows + co * g.depth + oh * g.planes.width;
            for (std::size_t x = 0; x < out_width; x += 16) {
                const __mmask16 mask = bf16_first_lanes(out_width - x);
                const __m256bh rounded = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mask, in + x));
                __m256i bits;
                std::memcpy(&bits, &rounded, sizeof(bits));
                _mm256_mask_storeu_epi16(out + x, mask, bits);
            }
        }
    }
}

// Both parities' pixel pairs of one image (see bf16_weight_gradient_
// geometry) from its channel-paired planes (prepare_bf16_image): for 16
// channels at a time, the two words holding pixels 2 q + e and 2 q + e + 1
// of their pairs, gathered, and each channel's half of them put together;
// zeros for the channels past the shape's.
PETRA_TARGET_AVX512_BF16 inline void prepare_bf16_pixel_pairs(const convolution_shape& shape,
                                                              const bf16_weight_gradient_geometry& g,
                                                              const std::uint32_t* phased, std::uint32_t* pairs)
{
    const std::size_t columns = g.in_blocks * 16;
    const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const auto* words = reinterpret_cast<const int*>(phased);
    for (std::size_t block = 0; block < g.in_blocks; ++block) {
        const std::size_t first = block * 16;
        const __mmask16 valid = bf16_first_lanes(shape.in_channels > first ? shape.in_channels - first : 0);
        // Lane l: channel first + l, in pair (first + l) / 2, its half (l % 2).
        const __m512i pair_start = _mm512_mullo_epi32(
            _mm512_maskz_srli_epi32(__mmask16(0xffff),
                                    _mm512_add_epi32(lane, _mm512_set1_epi32(static_cast<int>(first))), 1),
            _mm512_set1_epi32(static_cast<int>(g.planes.pair_stride)));
        for (std::size_t e = 0; e < 2; ++e) {
            std::uint32_t* out = pairs + e * g.pixel_pairs * columns + first;
            for (std::size_t q = 0; q < g.pixel_pairs; ++q) {
                const __m512i index = _mm512_add_epi32(pair_start, _mm512_set1_epi32(static_cast<int>(2 * q + e)));
                const __m512i low =
                    _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), valid, index, words, sizeof(std::uint32_t));
                const __m512i high = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), valid,
                                                                 _mm512_add_epi32(index, _mm512_set1_epi32(1)), words,
                                                                 sizeof(std::uint32_t));
                const __m512i mask16 = _mm512_set1_epi32(0xffff);
                // Even lanes: the low halves of both words; odd lanes: the
                // high ones. (The masked forms of the shifts and the
                // and-not: g++ 12 takes the others' undefined inputs for
                // uninitialised values.)
                const __m512i even = _mm512_or_si512(_mm512_and_si512(low, mask16),
                                                     _mm512_maskz_slli_epi32(__mmask16(0xffff), high, 16));
                const __m512i odd = _mm512_or_si512(_mm512_maskz_srli_epi32(__mmask16(0xffff), low, 16),
                                                    _mm512_maskz_andnot_epi32(__mmask16(0xffff), mask16, high));
                _mm512_storeu_si512(out + q * columns, _mm512_mask_blend_epi32(__mmask16(0xaaaa), even, odd));
            }
        }
    }
}

// The weight gradient's operands for one image of the batch, for either
// engine: its paired planes (zeroed by the caller once), its gradient rows
// and its pixel pairs.
PETRA_TARGET_AVX512_BF16 inline void prepare_bf16_weight_gradient_image(
    const convolution_shape& shape, const bf16_weight_gradient_geometry& g, const float* input, const float* grad_y,
    std::size_t image, std::uint32_t* phased, std::uint32_t* row_pairs, std::uint16_t* rows, std::uint32_t* pairs,
    affine_relu_map<float> input_map)
{
    prepare_bf16_image(shape, g.planes, input + image * shape.in_channels * shape.input_pixels(), phased, row_pairs,
                       input_map);
    prepare_bf16_gradient_rows(shape, g, grad_y + image * shape.out_channels * shape.output_pixels(), rows);
    prepare_bf16_pixel_pairs(shape, g, phased, pairs);
}

// sums[t][co][ci] += the weight gradient of tap t over the batch: per
// image, its paired planes, gradient rows and pixel pairs, then for every
// tap and block of 32 out by 32 input channels the sums' four tiles (0 to
// 3) loaded, every tile of depth added (4, 5: two tiles of 16 gradient
// rows; 6, 7: two of 16 pixel pairs by 16 channels) and stored back.
PETRA_TARGET_AMX inline void bf16_weight_gradient_images(const convolution_shape& shape,
                                                         const bf16_weight_gradient_geometry& g, const float* input,
                                                         const float* grad_y, const std::size_t* origins, float* sums,
                                                         std::uint32_t* phased, std::uint32_t* row_pairs,
                                                         std::uint16_t* rows, std::uint32_t* pairs,
                                                         affine_relu_map<float> input_map)
{
    const amx_tile_shapes shapes = amx_tile_shapes{}.set(0, 8, 16, 64);
    _tile_loadconfig(&shapes);
    const std::size_t out_blocks = g.planes.out_blocks, columns = g.in_blocks * 16;
    const std::size_t sum_row_bytes = columns * sizeof(float), row_bytes = g.depth * sizeof(std::uint16_t);
    const std::size_t pair_row_bytes = columns * sizeof(std::uint32_t);
    std::fill(phased, phased + g.planes.image_pairs, 0u);
    for (std::size_t image = 0; image < shape.batch; ++image) {
        prepare_bf16_weight_gradient_image(shape, g, input, grad_y, image, phased, row_pairs, rows, pairs, input_map);
        for (std::size_t t = 0; t < g.planes.taps; ++t) {
            const std::size_t parity = origins[t] % 2, first_pair = origins[t] / 2;
            const std::uint32_t* tap_pairs = pairs + (parity * g.pixel_pairs + first_pair) * columns;
            for (std::size_t b = 0; b < out_blocks; b += 2) {
                const bool two_out = b + 1 < out_blocks;
                const std::uint16_t* gradient = rows + b * 16 * g.depth;
                for (std::size_t c = 0; c < g.in_blocks; c += 2) {
                    const bool two_in = c + 1 < g.in_blocks;
                    float* tile_sums = sums + (t * out_blocks * 16 + b * 16) * columns + c * 16;
                    // Only the tiles of channels that exist: past them lies
                    // the next row or the end of the sums.
                    _tile_loadd(0, tile_sums, sum_row_bytes);
                    if (two_in) _tile_loadd(1, tile_sums + 16, sum_row_bytes);
                    if (two_out) _tile_loadd(2, tile_sums + 16 * columns, sum_row_bytes);
                    if (two_in && two_out) _tile_loadd(3, tile_sums + 16 * columns + 16, sum_row_bytes);
                    for (std::size_t k = 0; k < g.depth; k += 32) {
                        const std::uint32_t* x = tap_pairs + (k / 2) * columns + c * 16;
                        _tile_loadd(4, gradient + k, row_bytes);
                        _tile_loadd(6, x, pair_row_bytes);
                        _tile_dpbf16ps(0, 4, 6);
                        if (two_in) {
                            _tile_loadd(7, x + 16, pair_row_bytes);
                            _tile_dpbf16ps(1, 4, 7);
                        }
                        if (two_out) {
                            _tile_loadd(5, gradient + 16 * g.depth + k, row_bytes);
                            _tile_dpbf16ps(2, 5, 6);
                            if (two_in) _tile_dpbf16ps(3, 5, 7);
                        }
                    }
                    _tile_stored(0, tile_sums, sum_row_bytes);
                    if (two_in) _tile_stored(1, tile_sums + 16, sum_row_bytes);
                    if (two_out) _tile_stored(2, tile_sums + 16 * columns, sum_row_bytes);
                    if (two_in && two_out) _tile_stored(3, tile_sums + 16 * columns + 16, sum_row_bytes);
                }
            }
        }
    }
    _tile_release();
}

// The forward correlation of bf16_convolution_images with vdpbf16ps
// (AVX512-BF16), for CPUs without AMX: the same paired planes and packed
// weights, each image's results in blocks of 8 out channels (a pair of
// weights broadcast to every lane) by up to 3 vectors of 16 wide pixels (a
// vector of pixel pairs loaded in place at the tap's origin), 24
// accumulators over every tap and pair of input channels. A vector is
// computed only if it starts at a wide pixel, so that no load reaches
// further than a tile's (the planes' slack, bf16_convolution_geometry).

struct bf16_correlation_operands {
    const std::uint32_t* phased;  // the pixels of the block's first wide pixel, pair 0
    const std::size_t* origins;   // taps values
    const std::uint32_t* weights; // the block's first out channel, tap 0, chunk 0
    std::size_t taps, pairs, chunk_pairs, chunks, pair_stride, chunk_words;
};

// The part of a vector of 16 wide pixels that lies in one output row:
// lanes (a contiguous run) that go, in order, to the channel's output at
// `to`.
struct bf16_vector_piece {
    __mmask16 lanes;
    std::size_t to;
};

// The pieces of the vector of wide pixels [j, j + 16) (those below
// wide_pixels, in columns below out_width) into pieces; returns their count
// (at most 16 / width + 2).
inline std::size_t bf16_vector_pieces(std::size_t width, std::size_t out_width, std::size_t wide_pixels, std::size_t j,
                                      bf16_vector_piece* pieces)
{
    std::size_t count = 0;
    for_each_wide_row(
        width, j, std::min<std::size_t>(16, wide_pixels - j),
        [&](std::size_t row, std::size_t column, std::size_t length, std::size_t offset) {
            if (column >= out_width) return;
            length = std::min(length, out_width - column);
            pieces[count++] = {static_cast<__mmask16>(((1u << length) - 1u) << offset), row * out_width + column};
        });
    return count;
}

// out[piece.to + i] = the piece's i-th lane of values + beta * out[...]
// (out not read when beta == 0), for every piece of a vector.
PETRA_TARGET_AVX512_BF16 inline void store_bf16_vector(__m512 values, float* out, const bf16_vector_piece* pieces,
                                                       std::size_t count, float beta)
{
    for (std::size_t k = 0; k < count; ++k) {
        const __mmask16 lanes = pieces[k].lanes;
        const __mmask16 first = bf16_first_lanes(static_cast<std::size_t>(std::popcount(unsigned(lanes))));
        __m512 result = _mm512_maskz_compress_ps(lanes, values);
        float* target = out + pieces[k].to;
        if (beta != 0.0f) {
            result = _mm512_fmadd_ps(_mm512_set1_ps(beta), _mm512_maskz_loadu_ps(first, target), result);
        }
        _mm512_mask_storeu_ps(target, first, result);
    }
}

// For r < rows (at most 8) and v < Vectors: out + r * out_pixels receives
// (store_bf16_vector) the sums over taps t and pairs p of the pixel pairs
// at phased + origins[t] + p * pair_stride + 16 v (lane l: wide pixel
// 16 v + l of the block) times out channel r's weight pair, word
// r * chunk_pairs + p % chunk_pairs of the words for (t, p / chunk_pairs)
// at weights + (t * chunks + p / chunk_pairs) * chunk_words; pieces[v]
// (counts[v] of them) say where vector v's lanes go.
template <std::size_t Vectors>
PETRA_TARGET_AVX512_BF16 void bf16_correlation_block(const bf16_correlation_operands& o, std::size_t rows, float* out,
                                                     std::size_t out_pixels, const bf16_vector_piece (*pieces)[18],
                                                     const std::size_t* counts, float beta)
{
    constexpr std::size_t block_rows = 8, width = 16;
    __m512 accumulator[block_rows][Vectors];
    PETRA_UNROLL(8)
    for (std::size_t r = 0; r < block_rows; ++r) {
        PETRA_UNROLL(3)
        for (std::size_t v = 0; v < Vectors; ++v) accumulator[r][v] = _mm512_setzero_ps();
    }
    for (std::size_t t = 0; t < o.taps; ++t) {
        for (std::size_t c = 0; c < o.chunks; ++c) {
            const std::uint32_t* pixels = o.phased + o.origins[t] + c * o.chunk_pairs * o.pair_stride;
            const std::uint32_t* weights = o.weights + (t * o.chunks + c) * o.chunk_words;
            const std::size_t pairs = std::min(o.chunk_pairs, o.pairs - c * o.chunk_pairs);
            for (std::size_t k = 0; k < pairs; ++k) {
                __m512bh pixel_pairs[Vectors];
                PETRA_UNROLL(3)
                for (std::size_t v = 0; v < Vectors; ++v) {
                    pixel_pairs[v] = (__m512bh)_mm512_loadu_si512(pixels + k * o.pair_stride + v * width);
                }
                PETRA_UNROLL(8)
                for (std::size_t r = 0; r < block_rows; ++r) {
                    const __m512bh weight_pair =
                        (__m512bh)_mm512_set1_epi32(static_cast<int>(weights[r * o.chunk_pairs + k]));
                    PETRA_UNROLL(3)
                    for (std::size_t v = 0; v < Vectors; ++v) {
                        accumulator[r][v] = _mm512_dpbf16_ps(accumulator[r][v], pixel_pairs[v], weight_pair);
                    }
                }
            }
        }
    }
    PETRA_UNROLL(8)
    for (std::size_t r = 0; r < block_rows; ++r) {
        if (r >= rows) break;
        PETRA_UNROLL(3)
        for (std::size_t v = 0; v < Vectors; ++v) {
            store_bf16_vector(accumulator[r][v], out + r * out_pixels, pieces[v], counts[v], beta);
        }
    }
}

// bf16_convolution_images with bf16_correlation_block: the batch image by
// image, its paired planes, then every block of 8 out channels by 48 wide
// pixels, stored from the registers to the output's rows.
PETRA_TARGET_AVX512_BF16 inline void bf16_convolution_images_avx512(
    const convolution_shape& shape, const bf16_convolution_geometry& g, const float* input,
    const std::uint16_t* weights, const std::size_t* origins, float* output, float beta, std::uint32_t* phased,
    std::uint32_t* row_pairs, affine_relu_map<float> input_map)
{
    constexpr std::size_t rows = 8, width = 16, block = 3 * width;
    const std::size_t out_width = shape.out_width(), out_pixels = shape.output_pixels();
    const auto* weight_words = reinterpret_cast<const std::uint32_t*>(weights);
    bf16_correlation_operands operands{.phased = nullptr,
                                       .origins = origins,
                                       .weights = nullptr,
                                       .taps = g.taps,
                                       .pairs = (shape.in_channels + 1) / 2,
                                       .chunk_pairs = g.chunk_pairs,
                                       .chunks = g.chunks,
                                       .pair_stride = g.pair_stride,
                                       .chunk_words = g.out_blocks * g.tile_channels * g.chunk_pairs};
    std::fill(phased, phased + g.image_pairs, 0u);
    // Where each block's vectors go: the same for every image and channel.
    bf16_vector_piece pieces[3][18];
    std::size_t counts[3];
    const std::size_t image_values = shape.in_channels * shape.input_pixels();
    for (std::size_t image = 0; image < shape.batch; ++image) {
        prepare_bf16_image(shape, g, input + image * image_values, phased, row_pairs, input_map);
        // The next image's input on its way to L2 while this one is computed
        // (in a training step it comes from memory): asked for at once.
        if (image + 1 < shape.batch) prefetch_stream(images_bytes(input, image_values, image + 1, 1), 1).advance();
        float* out_image = output + image * shape.out_channels * out_pixels;
        for (std::size_t j = 0; j < g.wide_pixels; j += block) {
            const std::size_t vectors = std::min<std::size_t>(3, (g.wide_pixels - j + width - 1) / width);
            for (std::size_t v = 0; v < vectors; ++v) {
                counts[v] = bf16_vector_pieces(g.width, out_width, g.wide_pixels, j + v * width, pieces[v]);
            }
            operands.phased = phased + j;
            for (std::size_t co = 0; co < shape.out_channels; co += rows) {
                // Out channel co's weights: block co / 16, row co % 16 of it.
                operands.weights = weight_words + co * g.chunk_pairs;
                const std::size_t valid = std::min(rows, shape.out_channels - co);
                float* out = out_image + co * out_pixels;
                if (vectors == 3) bf16_correlation_block<3>(operands, valid, out, out_pixels, pieces, counts, beta);
                else if (vectors == 2)
                    bf16_correlation_block<2>(operands, valid, out, out_pixels, pieces, counts, beta);
                else bf16_correlation_block<1>(operands, valid, out, out_pixels, pieces, counts, beta);
            }
        }
    }
}

// The weight gradient of bf16_weight_gradient_images with vdpbf16ps: the
// same operands per image; for every tap, blocks of Rows out channels (a
// pair of one gradient row's values broadcast to every lane) by Vectors
// vectors of 16 input channels (a row of pixel pairs), over the depth's
// pixel pairs, added to the sums.

// sums[r * columns + 16 v + l] += sum over q < depth_pairs of the pixel
// pairs at pixel_pairs + q * columns + 16 v + l times gradient row r's
// pair q (word q of the row at gradient + r * row_words).
template <std::size_t Rows, std::size_t Vectors>
PETRA_TARGET_AVX512_BF16 void bf16_weight_gradient_block(std::size_t depth_pairs, const std::uint32_t* gradient,
                                                         std::size_t row_words, const std::uint32_t* pixel_pairs,
                                                         std::size_t columns, float* sums)
{
    constexpr std::size_t width = 16;
    __m512 accumulator[Rows][Vectors];
    PETRA_UNROLL(16)
    for (std::size_t r = 0; r < Rows; ++r) {
        PETRA_UNROLL(4)
        for (std::size_t v = 0; v < Vectors; ++v) accumulator[r][v] = _mm512_setzero_ps();
    }
    for (std::size_t q = 0; q < depth_pairs; ++q) {
        __m512bh channel_pairs[Vectors];
        PETRA_UNROLL(4)
        for (std::size_t v = 0; v < Vectors; ++v) {
            channel_pairs[v] = (__m512bh)_mm512_loadu_si512(pixel_pairs + q * columns + v * width);
        }
        PETRA_UNROLL(16)
        for (std::size_t r = 0; r < Rows; ++r) {
            const __m512bh gradient_pair = (__m512bh)_mm512_set1_epi32(static_cast<int>(gradient[r * row_words + q]));
            PETRA_UNROLL(4)
            for (std::size_t v = 0; v < Vectors; ++v) {
                accumulator[r][v] = _mm512_dpbf16_ps(accumulator[r][v], channel_pairs[v], gradient_pair);
            }
        }
    }
    PETRA_UNROLL(16)
    for (std::size_t r = 0; r < Rows; ++r) {
        PETRA_UNROLL(4)
        for (std::size_t v = 0; v < Vectors; ++v) {
            float* sum = sums + r * columns + v * width;
            _mm512_storeu_ps(sum, _mm512_add_ps(_mm512_loadu_ps(sum), accumulator[r][v]));
        }
    }
}

PETRA_TARGET_AVX512_BF16 inline void bf16_weight_gradient_images_avx512(
    const convolution_shape& shape, const bf16_weight_gradient_geometry& g, const float* input, const float* grad_y,
    const std::size_t* origins, float* sums, std::uint32_t* phased, std::uint32_t* row_pairs, std::uint16_t* rows,
    std::uint32_t* pairs, affine_relu_map<float> input_map)
{
    const std::size_t out_rows = g.planes.out_blocks * 16, columns = g.in_blocks * 16;
    const std::size_t row_words = g.depth / 2, depth_pairs = (g.planes.wide_pixels + 1) / 2;
    const auto* gradient_words = reinterpret_cast<const std::uint32_t*>(rows);
    std::fill(phased, phased + g.planes.image_pairs, 0u);
    for (std::size_t image = 0; image < shape.batch; ++image) {
        prepare_bf16_weight_gradient_image(shape, g, input, grad_y, image, phased, row_pairs, rows, pairs, input_map);
        for (std::size_t t = 0; t < g.planes.taps; ++t) {
            const std::size_t parity = origins[t] % 2, first_pair = origins[t] / 2;
            const std::uint32_t* tap_pairs = pairs + (parity * g.pixel_pairs + first_pair) * columns;
            float* tap_sums = sums + t * out_rows * columns;
            for (std::size_t c = 0; c < g.in_blocks;) {
                const std::uint32_t* x = tap_pairs + c * 16;
                const std::size_t left = g.in_blocks - c;
                // Rows times Vectors: 16 accumulators, 24 for three vectors.
                for (std::size_t co = 0; co < shape.out_channels;) {
                    const std::uint32_t* gradient = gradient_words + co * row_words;
                    float* block_sums = tap_sums + co * columns + c * 16;
                    if (left >= 4) {
                        bf16_weight_gradient_block<4, 4>(depth_pairs, gradient, row_words, x, columns, block_sums);
                        co += 4;
                    } else if (left == 3) {
                        bf16_weight_gradient_block<8, 3>(depth_pairs, gradient, row_words, x, columns, block_sums);
                        co += 8;
                    } else if (left == 2) {
                        bf16_weight_gradient_block<8, 2>(depth_pairs, gradient, row_words, x, columns, block_sums);
                        co += 8;
                    } else {
                        bf16_weight_gradient_block<16, 1>(depth_pairs, gradient, row_words, x, columns, block_sums);
                        co += 16;
                    }
                }
                c += std::min<std::size_t>(left, 4);
            }
        }
    }
}

#endif // PETRA_BF16_X86

// output = the correlation of shape (input, mapped by input_map where it is
// given; weight(co, ci, t)) + beta * output, for a validated shape with a
// non-empty batch, with an engine this CPU offers. Where statistics are
// given, also the batch mean and variance of each output channel, with
// channel_mean_variance's bits: for at most channel_chunk channels the
// batch is taken in its groups of images, each group's output added to
// the statistics while it is in the core's caches (as the float direct
// form does, convolution.hpp's forward_with_statistics); for more, over
// the whole output after it.
template <class Weight>
void bf16_correlation(bf16_engine engine, const convolution_shape& shape, const float* input, Weight&& weight,
                      float* output, float beta, scratch_source& source, affine_relu_map<float> input_map = {},
                      channel_statistics<float> statistics = {})
{
#if defined(PETRA_BF16_X86)
    const bf16_convolution_geometry g(shape);
    auto* phased = source.take<bf16_phased_image_tag, std::uint32_t>(g.image_pairs);
    auto* row_pairs = source.take<bf16_pair_row_tag, std::uint32_t>(shape.in_width);
    auto* packed = source.take<bf16_convolution_weights_tag, std::uint16_t>(g.weights_count());
    auto* origins = source.take<bf16_tap_origins_tag, std::size_t>(g.taps);
    pack_bf16_convolution_weights(shape, g, weight, packed);
    bf16_tap_origins(shape, g, origins);
    const auto images = [&](const convolution_shape& part, const float* in, float* out) {
        if (engine == bf16_engine::amx) {
            bf16_convolution_images(part, g, in, packed, origins, out, beta, phased, row_pairs, input_map);
        } else {
            bf16_convolution_images_avx512(part, g, in, packed, origins, out, beta, phased, row_pairs, input_map);
        }
    };
    const std::size_t pixels = shape.output_pixels(), channels = shape.out_channels;
    if (!statistics || channels > channel_chunk) {
        images(shape, input, output);
        if (statistics) {
            channel_mean_variance(shape.batch, channels, pixels, output, statistics.mean, statistics.variance);
        }
        return;
    }
    const std::size_t in_values = shape.in_channels * shape.input_pixels(), out_values = channels * pixels;
    mean_variance_groups<float> groups(shape.batch, channels, pixels, 0, channels, mean_variance_group_bytes());
    for (std::size_t first = 0; first < shape.batch; first += groups.group()) {
        const std::size_t count = std::min(groups.group(), shape.batch - first);
        images(with_batch(shape, count), input + first * in_values, output + first * out_values);
        groups.add(first, count, output + first * out_values);
    }
    groups.finish(statistics.mean, statistics.variance);
#else
    (void)engine, (void)shape, (void)input, (void)weight, (void)output, (void)beta, (void)source, (void)input_map,
        (void)statistics;
#endif
}

// The input gradient as a forward correlation with the weights flipped,
// out and input channels exchanged: for stride 1, of the output gradient
// itself, padded by kernel - 1 - padding; for stride 2, of the output
// gradient dilated (each value at row 2 i + kernel - 1 - padding and
// likewise for columns, zeros between and around, as the stride-2 forward
// reads the padded input) with no further padding, `images` at a time.
constexpr convolution_shape transposed_for_input_gradient(const convolution_shape& shape, std::size_t images)
{
    if (shape.stride == 1) {
        return {images,
                shape.out_channels,
                shape.out_height(),
                shape.out_width(),
                shape.in_channels,
                shape.kernel,
                1,
                shape.kernel - 1 - shape.padding};
    }
    return {images,
            shape.out_channels,
            shape.in_height + shape.kernel - 1,
            shape.in_width + shape.kernel - 1,
            shape.in_channels,
            shape.kernel,
            1,
            0};
}

// What bf16_correlation takes of its scratch, in order.
constexpr void ask_bf16_correlation_scratch(scratch_demand& demand, const convolution_shape& shape)
{
    const bf16_convolution_geometry g(shape);
    demand.template ask<bf16_phased_image_tag, std::uint32_t>(g.image_pairs);
    demand.template ask<bf16_pair_row_tag, std::uint32_t>(shape.in_width);
    demand.template ask<bf16_convolution_weights_tag, std::uint16_t>(g.weights_count());
    demand.template ask<bf16_tap_origins_tag, std::size_t>(g.taps);
}

struct bf16_dilated_gradient_tag {};

// Images of a stride-2 input gradient dilated at a time: as many as keep
// their dilated gradient within the Winograd kernels' group budget (half of
// L2; at compile time its ceiling).
constexpr std::size_t dilated_chunk_images(const convolution_shape& shape)
{
    const convolution_shape one = transposed_for_input_gradient(shape, 1);
    return chunk_images(shape.batch, one.input_count() * sizeof(float));
}

} // namespace detail

// The three passes of a convolution, for bf16_convolution_pays.
enum class convolution_pass { forward, input_gradient, weight_gradient };

// Whether the bf16 kernel of `pass` over shape runs faster on `engine`
// than the float kernel, as measured on the reference network's shapes
// (bench/RESULTS.md, "bf16 products"); what conv2d takes in bf16:
// - amx (Intel model 167): every pass over more than one input channel,
//   except the 1x1 kernel's gradients: the stem's one input channel ran
//   0.52-0.59x its float forward, the 1x1 gradients 0.74-0.84x; every other
//   pass 1.03-3.2x.
// - avx512_bf16 (AMD Zen 5: vdpbf16ps at twice the float FMA's rate): the
//   forward correlations of 3x3 kernels over more than one input channel
//   (forward; input gradient at stride 1) that Winograd's float form does
//   not take. Against the float kernels the stride-2 forwards ran 1.35-1.5x;
//   Winograd over 32 and 64 channels 0.6-0.93x, and over 16 channels at
//   28x28 1.32x until the float products' blocks stopped wasting rows, then
//   about 0.8x in a step (F(4x4, 3x3) multiplies 4 times less than a direct
//   form, which bf16's doubled rate does not make up; bf16 inside Winograd's
//   form loses the accuracy: bench/RESULTS.md, "bf16 in training"); the
//   dilated stride-2 input gradient 0.46x, the 1x1 kernel and the stem
//   0.6-0.7x, and every weight gradient 0.64-0.85x.
constexpr bool bf16_convolution_pays(const convolution_shape& shape, convolution_pass pass, bf16_engine engine)
{
    if (shape.in_channels < 2) return false;
    if (engine == bf16_engine::amx) return pass == convolution_pass::forward || shape.kernel == 3;
    const bool correlation =
        pass == convolution_pass::forward || (pass == convolution_pass::input_gradient && shape.stride == 1);
    return shape.kernel == 3 && correlation && !detail::winograd_applies(shape);
}

// Whether either engine takes `pass` over shape in bf16.
constexpr bool bf16_convolution_pays_on_some_engine(const convolution_shape& shape, convolution_pass pass)
{
    return bf16_convolution_pays(shape, pass, bf16_engine::amx) ||
           bf16_convolution_pays(shape, pass, bf16_engine::avx512_bf16);
}

// The scratch convolution_forward_bf16 takes (scratch.hpp): one image's
// paired planes, a row of pairs, the packed weights and the taps' origins.
constexpr scratch_demand convolution_forward_bf16_scratch(const convolution_shape& shape)
{
    scratch_demand demand;
    if (shape.batch == 0) return demand;
    detail::ask_bf16_correlation_scratch(demand, shape);
    return demand;
}

// The scratch convolution_backward_input_bf16 takes: its transposed
// forward's.
constexpr scratch_demand convolution_backward_input_bf16_scratch(const convolution_shape& shape)
{
    if (shape.batch == 0 || shape.stride == 1) {
        return convolution_forward_bf16_scratch(detail::transposed_for_input_gradient(shape, shape.batch));
    }
    const std::size_t images = detail::dilated_chunk_images(shape);
    const convolution_shape dilated = detail::transposed_for_input_gradient(shape, images);
    scratch_demand demand;
    demand.template ask<detail::bf16_dilated_gradient_tag, float>(dilated.input_count());
    detail::ask_bf16_correlation_scratch(demand, dilated);
    return demand;
}

// output = convolution(input, weights) + beta * output (output not read
// when beta == 0), as convolution_forward<float> computes it, except that
// the input and the weights are first rounded to bf16 and the products
// summed in float, on `engine` (by default the best the CPU offers, AMX
// tiles before vdpbf16ps). Throws std::invalid_argument for a shape the
// kernels do not take (validate) and, naming its instruction, for an engine
// the CPU lacks (by default: with neither). Scratch as convolution_forward's, of
// convolution_forward_bf16_scratch(shape).region_bytes(). With an input map
// (input_map.hpp; any shape), the input is read as if mapped first, and
// the mapped values rounded. Where output_statistics is given (reduction.hpp),
// also the batch mean and variance of each output channel, the bits
// channel_mean_variance gives over the output, computed as the float
// direct form computes them (for up to 32 channels, a group of images at a
// time as soon as it is written).
inline void convolution_forward_bf16(const convolution_shape& shape, const float* input, const float* weights,
                                     float* output, float beta = 0.0f, std::span<std::byte> scratch = {},
                                     affine_relu_map<float> input_map = {},
                                     channel_statistics<float> output_statistics = {},
                                     bf16_engine engine = best_bf16_engine())
{
    PETRA_PROFILE_KERNEL(
        "convolution forward bf16", detail::convolution_geometry, detail::convolution_sizes(shape),
        double(shape.flops()),
        detail::convolution_bytes(shape.input_count() + shape.weight_count(), shape.output_count(), beta));
    validate(shape);
    detail::require_bf16_engine(engine, "convolution_forward_bf16");
    if (shape.batch == 0) return;
    const std::size_t taps = shape.kernel * shape.kernel;
    scratch_source source(scratch);
    detail::bf16_correlation(
        engine, shape, input,
        [&](std::size_t co, std::size_t ci, std::size_t t) {
            return weights[(co * shape.in_channels + ci) * taps + t];
        },
        output, beta, source, input_map, output_statistics);
}

// grad_x = (gradient of the forward pass with respect to its input, applied
// to grad_y) + beta * grad_x (grad_x not read when beta == 0), as
// convolution_backward_input<float> computes it, except that grad_y and
// the weights are rounded to bf16 and the products summed in float, on
// `engine`: the forward correlation of grad_y with the flipped weights; for
// stride 2, of grad_y dilated, a few images at a time
// (transposed_for_input_gradient: three quarters of its products are of
// zeros, which AMX's rate affords). Otherwise as convolution_forward_bf16,
// with convolution_backward_input_bf16_scratch(shape).
inline void convolution_backward_input_bf16(const convolution_shape& shape, const float* grad_y, const float* weights,
                                            float* grad_x, float beta = 0.0f, std::span<std::byte> scratch = {},
                                            bf16_engine engine = best_bf16_engine())
{
    PETRA_PROFILE_KERNEL(
        "convolution input gradient bf16", detail::convolution_geometry, detail::convolution_sizes(shape),
        double(shape.flops()),
        detail::convolution_bytes(shape.output_count() + shape.weight_count(), shape.input_count(), beta));
    validate(shape);
    detail::require_bf16_engine(engine, "convolution_backward_input_bf16");
    if (shape.batch == 0) return;
    const std::size_t taps = shape.kernel * shape.kernel;
    // Transposed out channel c is the shape's input channel c, and tap t is
    // the shape's tap taps - 1 - t (both axes flipped).
    const auto flipped = [&](std::size_t c, std::size_t co, std::size_t t) {
        return weights[(co * shape.in_channels + c) * taps + (taps - 1 - t)];
    };
    scratch_source source(scratch);
    if (shape.stride == 1) {
        detail::bf16_correlation(engine, detail::transposed_for_input_gradient(shape, shape.batch), grad_y, flipped,
                                 grad_x, beta, source);
        return;
    }
    const std::size_t images = detail::dilated_chunk_images(shape);
    const convolution_shape whole = detail::transposed_for_input_gradient(shape, images);
    float* dilated = source.take<detail::bf16_dilated_gradient_tag, float>(whole.input_count());
    // Zeros once: every chunk writes its values at the same places.
    std::fill(dilated, dilated + whole.input_count(), 0.0f);
    const std::size_t height = whole.in_height, width = whole.in_width, offset = shape.kernel - 1 - shape.padding;
    const std::size_t out_height = shape.out_height(), out_width = shape.out_width();
    for (std::size_t first = 0; first < shape.batch; first += images) {
        const std::size_t count = std::min(images, shape.batch - first);
        const convolution_shape part = detail::transposed_for_input_gradient(shape, count);
        for (std::size_t plane = 0; plane < count * shape.out_channels; ++plane) {
            const float* in = grad_y + (first * shape.out_channels + plane) * out_height * out_width;
            float* out = dilated + plane * height * width + offset * width + offset;
            for (std::size_t i = 0; i < out_height; ++i) {
                for (std::size_t j = 0; j < out_width; ++j) out[2 * i * width + 2 * j] = in[i * out_width + j];
            }
        }
        // Each chunk's correlation takes the same memory after the dilated
        // gradient again.
        scratch_source chunk_source = source;
        detail::bf16_correlation(engine, part, dilated, flipped,
                                 grad_x + first * shape.in_channels * shape.input_pixels(), beta, chunk_source);
    }
}

// The scratch convolution_backward_weights_bf16 takes: one image's paired
// planes, a row of pairs, gradient rows and pixel pairs, the sums and the
// taps' origins.
constexpr scratch_demand convolution_backward_weights_bf16_scratch(const convolution_shape& shape)
{
    scratch_demand demand;
    if (shape.batch == 0) return demand;
    const detail::bf16_weight_gradient_geometry g(shape);
    demand.template ask<detail::bf16_phased_image_tag, std::uint32_t>(g.planes.image_pairs);
    demand.template ask<detail::bf16_pair_row_tag, std::uint32_t>(shape.in_width);
    demand.template ask<detail::bf16_gradient_rows_tag, std::uint16_t>(g.rows_count());
    demand.template ask<detail::bf16_pixel_pairs_tag, std::uint32_t>(g.pairs_count());
    demand.template ask<detail::bf16_gradient_sums_tag, float>(g.sums_count());
    demand.template ask<detail::bf16_tap_origins_tag, std::size_t>(g.planes.taps);
    return demand;
}

// grad_weights = (gradient of the forward pass with respect to its weights,
// applied to grad_y, summed over the batch) + beta * grad_weights
// (grad_weights not read when beta == 0), as
// convolution_backward_weights<float> computes it, except that the input
// and grad_y are rounded to bf16 and the products summed in float, on
// `engine`: per image, the gradient's rows (out channels by wide pixels) times
// the input's pixel pairs at each tap's origin (pixels by input channels).
// Throws as convolution_forward_bf16; scratch of
// convolution_backward_weights_bf16_scratch(shape); the input mapped by
// input_map where it is given, as in convolution_forward_bf16.
inline void convolution_backward_weights_bf16(const convolution_shape& shape, const float* input, const float* grad_y,
                                              float* grad_weights, float beta = 0.0f, std::span<std::byte> scratch = {},
                                              affine_relu_map<float> input_map = {},
                                              bf16_engine engine = best_bf16_engine())
{
    PETRA_PROFILE_KERNEL(
        "convolution weight gradient bf16", detail::convolution_geometry, detail::convolution_sizes(shape),
        double(shape.flops()),
        detail::convolution_bytes(shape.input_count() + shape.output_count(), shape.weight_count(), beta));
    validate(shape);
    detail::require_bf16_engine(engine, "convolution_backward_weights_bf16");
    if (shape.batch == 0) {
        detail::scale_in_place(grad_weights, shape.weight_count(), beta);
        return;
    }
#if defined(PETRA_BF16_X86)
    const std::size_t taps = shape.kernel * shape.kernel;
    const detail::bf16_weight_gradient_geometry g(shape);
    scratch_source source(scratch);
    auto* phased = source.take<detail::bf16_phased_image_tag, std::uint32_t>(g.planes.image_pairs);
    auto* row_pairs = source.take<detail::bf16_pair_row_tag, std::uint32_t>(shape.in_width);
    auto* rows = source.take<detail::bf16_gradient_rows_tag, std::uint16_t>(g.rows_count());
    auto* pairs = source.take<detail::bf16_pixel_pairs_tag, std::uint32_t>(g.pairs_count());
    auto* sums = source.take<detail::bf16_gradient_sums_tag, float>(g.sums_count());
    auto* origins = source.take<detail::bf16_tap_origins_tag, std::size_t>(taps);
    std::fill(sums, sums + g.sums_count(), 0.0f);
    detail::bf16_tap_origins(shape, g.planes, origins);
    if (engine == bf16_engine::amx) {
        detail::bf16_weight_gradient_images(shape, g, input, grad_y, origins, sums, phased, row_pairs, rows, pairs,
                                            input_map);
    } else {
        detail::bf16_weight_gradient_images_avx512(shape, g, input, grad_y, origins, sums, phased, row_pairs, rows,
                                                   pairs, input_map);
    }
    const std::size_t columns = g.in_blocks * 16;
    for (std::size_t co = 0; co < shape.out_channels; ++co) {
        for (std::size_t ci = 0; ci < shape.in_channels; ++ci) {
            for (std::size_t t = 0; t < taps; ++t) {
                float& weight = grad_weights[(co * shape.in_channels + ci) * taps + t];
                const float sum = sums[(t * g.planes.out_blocks * 16 + co) * columns + ci];
                weight = beta == 0.0f ? sum : sum + beta * weight;
            }
        }
    }
#else
    (void)input, (void)grad_y, (void)scratch, (void)input_map, (void)engine;
#endif
}

} // namespace petra::kernels
