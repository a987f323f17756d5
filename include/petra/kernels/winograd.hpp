// Winograd's minimal filtering F(2x2, 3x3) for the 3x3 convolutions with
// stride 1 and padding 1: the forward pass and the input gradient (the same
// correlation with flipped, transposed weights), winograd_correlation; the
// weight gradient, winograd_weight_gradient (further down). Each 2x2 block
// of results is computed from a 4x4 patch of the source with 16
// multiplications per channel pair instead of 36.
//
//   result tile = A^T [ sum over source channels of (G g G^T) .* (B^T d B) ] A
//
// with d the 4x4 source patch, g the 3x3 weights and
//   B^T = | 1  0 -1  0 |   G = | 1    0    0   |   A^T = | 1  1  1  0 |
//         | 0  1  1  0 |       | 1/2  1/2  1/2 |         | 0  1 -1 -1 |
//         | 0 -1  1  0 |       | 1/2 -1/2  1/2 |
//         | 0  1  0 -1 |       | 0    0    1   |
//
// Layout: the channels run along the vectors. An image is transposed once to
// pixel-major order (each pixel's channels contiguous, padded with zeros to
// whole vectors) inside a zero border, one image at a time; the transformed
// patches then form 16 matrices V_e (tiles x source channels) and the
// transformed weights 16 matrices U_e (source channels x result channels),
// and the products M_e = V_e U_e are 16 small GEMMs whose micro-kernel
// broadcasts one element of V_e against whole vectors of U_e's row. M is
// stored tile by tile (a tile's 16 products one after another, each a row of
// result channels), so that the output transform reads each tile from
// consecutive cache lines rather than from 16 (36 for F(4x4, 3x3)) planes,
// more streams than the prefetchers follow. The output transform turns M's 16
// values of a tile into its 2x2 results, still pixel-major, and one more
// transposition returns them to NCHW. Images are taken a few at a time so
// that V and M of a group stay within half of the core's L2 cache (U, the
// same for every group, is 16 KiB to 256 KiB on the reference network).
//
// Kernels know nothing of layers: this file is reached only through
// kernels/convolution.hpp, which decides when the form applies.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <numeric>
#include <span>
#include <type_traits>
#include <utility>

#include <petra/error.hpp>
#include <petra/kernels/cache_sizes.hpp>
#include <petra/kernels/gemm.hpp>
#include <petra/kernels/input_map.hpp>
#include <petra/kernels/layout.hpp>
#include <petra/kernels/reduction.hpp>
#include <petra/kernels/scratch.hpp>
#include <petra/kernels/simd.hpp>

namespace petra::kernels::detail {

struct winograd_bordered_tag {};
struct winograd_patches_tag {};
struct winograd_weights_tag {};
struct winograd_products_tag {};
struct winograd_results_tag {};
struct winograd_staged_tag {};
struct winograd_gradient_tiles_tag {};
struct winograd_gradient_sums_tag {};
struct winograd_statistics_tag {};

// Register blocking of the 16 products: Rows tiles times Vectors vectors of
// result channels. 24 accumulators fit 32 vector registers with the weight
// vectors and the broadcast; 12 fit 16. Where the result channels take one
// vector, the products' blocks may also take fewer rows than there are
// accumulators (one_vector_rows, largest first): a group's tiles are padded
// to a multiple of the rows, and the rows that divide them waste no
// products. On the reference network's 28x28 x 16-channel convolutions (49
// tiles an image in F(4x4, 3x3), two images a group) 24 rows computed 120
// rows for 98 tiles; 14 rows compute 98, and the forward and the input
// gradient ran 1.17-1.19 times faster alone (Zen 5, bench/RESULTS.md).
template <class T>
struct winograd_blocking {
    static constexpr bool wide = gemm_blocking<T>::wide_register_file;
    static constexpr std::size_t accumulators = wide ? 24 : 12;
    static constexpr std::size_t max_vectors = wide ? 4 : 2;
    static constexpr std::size_t rows_for(std::size_t vectors) { return accumulators / vectors; }
    // (With 16 registers, not measured: the accumulators' count only.)
    static constexpr std::array<std::size_t, 3> one_vector_rows =
        wide ? std::array<std::size_t, 3>{24, 16, 14} : std::array<std::size_t, 3>{12, 12, 12};
};

// The bytes a group of images may hold in V and M: half of the L2 cache of
// the core that runs the kernel (cache_sizes.hpp), at least 64 KiB and at
// most winograd_max_group_bytes. Evaluated at compile time, as scratch
// demands are for static memory plans, it is that ceiling, which bounds
// every group a core will choose (more bytes never choose fewer images). On
// a Zen 4 core (1 MiB of L2) budgets of 128 KiB to 2 MiB measured within
// noise of each other on the reference network's convolutions
// (bench/RESULTS.md); half of L2 is the budget the form was written for.
inline constexpr std::size_t winograd_max_group_bytes = std::size_t(1) << 20;

constexpr std::size_t winograd_group_bytes()
{
    if (std::is_constant_evaluated()) return winograd_max_group_bytes;
    return std::clamp<std::size_t>(blocking_caches().l2 / 2, std::size_t(64) << 10, winograd_max_group_bytes);
}

// Sizes of one call: per image and per group of images. The tiles of a
// group are multiplied together, their count rounded up to the row counts of
// the blocks that multiply them (rows computed and never read); a group
// holds as many images as keep its transformed patches and products within
// group_bytes (winograd_group_bytes: half of the L2 cache of the core that
// runs it), choosing among those counts the one that wastes the smallest
// share of rows.
template <class T>
struct winograd_geometry {
    static constexpr std::size_t width_of_vector = simd_width<T>;

    std::size_t batch, height, width, source_channels, result_channels;
    // Results per tile along each axis (2: F(2x2, 3x3), or 4: F(4x4, 3x3)),
    // the patch's side (output_tile + 2) and the products of a tile.
    std::size_t output_tile, patch_side, products_per_tile;
    std::size_t tile_rows, tile_columns, tiles;
    std::size_t source_stride, result_stride;
    std::size_t bordered_width, bordered_pixels;
    // The rows of the products' blocks where the result channels take one
    // vector (winograd_blocking::one_vector_rows; otherwise the accumulator
    // count, unused and not searched for), and a multiple of every block's
    // rows, to which a group's tiles are padded.
    std::size_t one_vector_rows, row_multiple;
    std::size_t group_images, group_tiles;

    constexpr winograd_geometry(std::size_t batch_, std::size_t height_, std::size_t width_,
                                std::size_t source_channels_, std::size_t result_channels_,
                                std::size_t output_tile_ = 2, std::size_t group_bytes = winograd_group_bytes())
        : batch(batch_), height(height_), width(width_), source_channels(source_channels_),
          result_channels(result_channels_), output_tile(output_tile_), patch_side(output_tile_ + 2),
          products_per_tile(patch_side * patch_side), tile_rows((height_ + output_tile_ - 1) / output_tile_),
          tile_columns((width_ + output_tile_ - 1) / output_tile_), tiles(tile_rows * tile_columns),
          source_stride(round_up(source_channels_)), result_stride(round_up(result_channels_)),
          bordered_width(output_tile_ * tile_columns + 2),
          bordered_pixels((output_tile_ * tile_rows + 2) * bordered_width),
          one_vector_rows(result_stride == width_of_vector
                              ? least_wasting_rows(batch_, tiles, products_per_tile * (source_stride + result_stride))
                              : winograd_blocking<T>::rows_for(1)),
          row_multiple(result_stride == width_of_vector ? one_vector_rows : rows_multiple(result_stride)),
          group_images(best_group(batch_, tiles, products_per_tile * (source_stride + result_stride), row_multiple,
                                  group_bytes)),
          group_tiles(padded_tiles(group_images * tiles, row_multiple))
    {}

    static constexpr std::size_t round_up(std::size_t channels)
    {
        return (channels + width_of_vector - 1) / width_of_vector * width_of_vector;
    }
    static constexpr std::size_t padded_tiles(std::size_t count, std::size_t multiple)
    {
        return (count + multiple - 1) / multiple * multiple;
    }
    // A multiple of the row count of every block multiply_transformed runs
    // for this many result channels: the full passes' and the last one's.
    static constexpr std::size_t rows_multiple(std::size_t result_stride)
    {
        using blocking = winograd_blocking<T>;
        const std::size_t vectors = result_stride / width_of_vector;
        const std::size_t full = vectors >= blocking::max_vectors ? blocking::rows_for(blocking::max_vectors) : 1;
        const std::size_t rest = vectors % blocking::max_vectors;
        return rest == 0 ? full : std::lcm(full, blocking::rows_for(rest));
    }
    // Of winograd_blocking::one_vector_rows, the rows whose best group wastes
    // the smallest share of its rows (the first such, the most rows), the
    // groups chosen under the ceiling winograd_max_group_bytes whatever the
    // call's budget: the rows are then the same on every core, and a smaller
    // budget never chooses a group larger than the ceiling's (scratch
    // demands are evaluated at that ceiling).
    static constexpr std::size_t least_wasting_rows(std::size_t batch, std::size_t tiles, std::size_t values_per_tile)
    {
        std::size_t best_rows = 0, best_padded = 1, best_images = 0;
        for (const std::size_t rows : winograd_blocking<T>::one_vector_rows) {
            const std::size_t images = best_group(batch, tiles, values_per_tile, rows, winograd_max_group_bytes);
            const std::size_t padded = padded_tiles(images * tiles, rows);
            // Fewer padded rows per image than the best's, compared without division.
            if (best_rows == 0 || padded * best_images < best_padded * images) {
                best_rows = rows, best_padded = padded, best_images = images;
            }
        }
        return best_rows;
    }
    // values_per_tile: of V and M together.
    static constexpr std::size_t best_group(std::size_t batch, std::size_t tiles, std::size_t values_per_tile,
                                            std::size_t multiple, std::size_t group_bytes)
    {
        const std::size_t per_tile = values_per_tile * sizeof(T);
        std::size_t best = 1;
        for (std::size_t images = 2; images <= batch; ++images) {
            const std::size_t rows = padded_tiles(images * tiles, multiple);
            if (rows * per_tile > group_bytes) break;
            // Fewer wasted rows per image, compared without division.
            if (rows * best < padded_tiles(best * tiles, multiple) * images) best = images;
        }
        return best;
    }
    std::size_t pixels() const { return height * width; }
    constexpr std::size_t bordered_count() const { return bordered_pixels * source_stride; }
    // The 16 planes of V (and of the weight gradient's dM where it lies plane
    // by plane) lie plane_slack values further apart than their rows need:
    // planes a multiple of 4 KiB apart would map the 16 stores of a tile's
    // transform to one set of the L1 cache. The slack is zero and also what
    // the weight gradient's blocks of source channels read past the last row
    // of a plane (fewer than plane_slack values). U's planes too: at 32 and
    // 64 channels they were 4 and 16 KiB apart, and the weight transform
    // wrote its 36 planes at 14-16 GB/s, against 44-51 with the slack (the
    // transforms took 55% of a batch-1 forward of the reference network,
    // 30% since; bench/RESULTS.md).
    static constexpr std::size_t plane_slack = 32;
    constexpr std::size_t patch_plane() const { return group_tiles * source_stride + plane_slack; }
    constexpr std::size_t product_plane() const { return group_tiles * result_stride + plane_slack; }
    constexpr std::size_t weight_plane() const { return source_channels * result_stride + plane_slack; }
    constexpr std::size_t patches_count() const { return products_per_tile * patch_plane(); }
    constexpr std::size_t weights_count() const { return products_per_tile * weight_plane(); }
    constexpr std::size_t products_count() const { return products_per_tile * product_plane(); }
    // Values from one tile's products to the next's in the correlation's M,
    // which is tile-major (the weight gradient's dM too where its result
    // channels take one vector: winograd_gradient_sizes::dm_by_tile, below).
    constexpr std::size_t tile_products() const { return products_per_tile * result_stride; }
    constexpr std::size_t results_count() const { return height * width * result_stride; }
    constexpr std::size_t staged_count() const { return height * width * result_channels; }
};

// The buffers both the correlation and the weight gradient take: the
// source transposed and bordered, V and M (or dM).
template <class T>
constexpr void ask_winograd_common_scratch(scratch_demand& demand, const winograd_geometry<T>& geometry)
{
    demand.template ask<winograd_bordered_tag, T>(geometry.bordered_count());
    demand.template ask<winograd_patches_tag, T>(geometry.patches_count());
    demand.template ask<winograd_products_tag, T>(geometry.products_count());
}

// The scratch winograd_correlation takes (scratch.hpp): also the
// transformed weights, one image's results pixel-major and the running sums
// of result_statistics, and with
// accumulates (a caller that may pass beta != 0) their staging in NCHW.
template <class T>
constexpr void ask_winograd_scratch(scratch_demand& demand, const winograd_geometry<T>& geometry, bool accumulates)
{
    ask_winograd_common_scratch(demand, geometry);
    demand.template ask<winograd_weights_tag, T>(geometry.weights_count());
    demand.template ask<winograd_results_tag, T>(geometry.results_count());
    demand.template ask<winograd_statistics_tag, T>(3 * geometry.result_stride);
    if (accumulates) demand.template ask<winograd_staged_tag, T>(geometry.staged_count());
}

// F(4x4, 3x3), the larger tile (output_tile 4): 6x6 patches, 36 products
// per channel pair for 16 results (2.25 per result, against 4 for F(2x2,
// 3x3)), with the interpolation points 0, 1, -1, 2, -2 and infinity:
//
//   B^T = | 4  0 -5  0  1  0 |   G = |  1/4     0     0   |   A^T = | 1 1  1 1  1 0 |
//         | 0 -4 -4  1  1  0 |       | -1/6  -1/6  -1/6  |         | 0 1 -1 2 -2 0 |
//         | 0  4 -4 -1  1  0 |       | -1/6   1/6  -1/6  |         | 0 1  1 4  4 0 |
//         | 0 -2 -1  2  1  0 |       |  1/24  1/12  1/6  |         | 0 1 -1 8 -8 1 |
//         | 0  2 -1 -2  1  0 |       |  1/24 -1/12  1/6  |
//         | 0  4  0 -5  0  1 |       |  0     0     1    |
//
// Its rounding error grows with the larger coefficients: the form is taken
// where it measured faster (winograd_output_tile), and test_convolution
// holds it to the same tolerance as the direct form.

// G x for the three values x of a column of weights.
template <class V>
PETRA_ALWAYS_INLINE void weights_column_f4(const V (&x)[3], V (&out)[6])
{
    using T = typename V::value_type;
    const V sum = x[0] + x[2];
    out[0] = V(T(1) / T(4)) * x[0];
    out[1] = V(T(-1) / T(6)) * (sum + x[1]);
    out[2] = V(T(-1) / T(6)) * (sum - x[1]);
    // xsimd::fma, not fused_multiply_add: an addend that is a product (simd.hpp).
    const V outer = xsimd::fma(V(T(1) / T(24)), x[0], V(T(1) / T(6)) * x[2]);
    out[3] = fused_multiply_add(V(T(1) / T(12)), x[1], outer);
    out[4] = fused_multiply_add(V(T(-1) / T(12)), x[1], outer);
    out[5] = x[2];
}

// U's 36 values of one source channel and one vector of result channels,
// G g G^T, stored `plane` values apart from out.
template <class V>
PETRA_ALWAYS_INLINE void transform_weights_f4(const V (&g)[3][3], std::size_t plane, typename V::value_type* out)
{
    V columns[3][6]; // G g, column by column
    PETRA_UNROLL(3)
    for (std::size_t k = 0; k < 3; ++k) {
        const V column[3] = {g[0][k], g[1][k], g[2][k]};
        weights_column_f4(column, columns[k]);
    }
    PETRA_UNROLL(6)
    for (std::size_t i = 0; i < 6; ++i) { // (G g) G^T, row by row
        const V row[3] = {columns[0][i], columns[1][i], columns[2][i]};
        V transformed[6];
        weights_column_f4(row, transformed);
        PETRA_UNROLL(6)
        for (std::size_t j = 0; j < 6; ++j) transformed[j].store_aligned(out + (i * 6 + j) * plane);
    }
}

// Row R of B^T d for one column of six patch values, d(i) the column's
// value i: each row is computed from the column's values alone, so that a
// row computed by itself has the bits it has among the six.
template <std::size_t R, class V, class Value>
PETRA_ALWAYS_INLINE V patch_column_f4_row(Value&& d)
{
    using T = typename V::value_type;
    const V four(T(4)), minus_five(T(-5)), two(T(2));
    if constexpr (R == 0) return fused_multiply_add(minus_five, d(2), fused_multiply_add(four, d(0), d(4)));
    else if constexpr (R == 1) return fused_multiply_add(-four, d(1) + d(2), d(3) + d(4));
    else if constexpr (R == 2) return fused_multiply_add(four, d(1) - d(2), d(4) - d(3));
    else if constexpr (R == 3) return fused_multiply_add(-two, d(1) - d(3), d(4) - d(2));
    else if constexpr (R == 4) return fused_multiply_add(two, d(1) - d(3), d(4) - d(2));
    else return fused_multiply_add(minus_five, d(3), fused_multiply_add(four, d(1), d(5)));
}

// B^T d for one column of six patch values.
template <class V>
PETRA_ALWAYS_INLINE void patch_column_f4(const V (&d)[6], V (&out)[6])
{
    const auto value = [&d](std::size_t i) { return d[i]; };
    [&]<std::size_t... R>(std::index_sequence<R...>) { ((out[R] = patch_column_f4_row<R, V>(value)), ...); }
    (std::make_index_sequence<6>{});
}

// Rows Pair and Pair + 2 of A^T m for one column of six products, m(i)
// the column's value i: rows 0 and 2 share m[1] + m[2] and m[3] + m[4], rows
// 1 and 3 the differences, so a pair is computed from the column alone with
// the bits it has among the four.
template <std::size_t Pair, class V, class Value>
PETRA_ALWAYS_INLINE void product_column_f4_pair(Value&& m, V& first, V& second)
{
    using T = typename V::value_type;
    if constexpr (Pair == 0) {
        const V plus = m(1) + m(2), outer_plus = m(3) + m(4);
        first = m(0) + plus + outer_plus;
        second = fused_multiply_add(V(T(4)), outer_plus, plus);
    } else {
        const V minus = m(1) - m(2), outer_minus = m(3) - m(4);
        first = fused_multiply_add(V(T(2)), outer_minus, minus);
        second = fused_multiply_add(V(T(8)), outer_minus, minus) + m(5);
    }
}

// A^T m for one column of six products.
template <class V>
PETRA_ALWAYS_INLINE void product_column_f4(const V (&m)[6], V (&out)[4])
{
    const auto value = [&m](std::size_t i) { return m[i]; };
    product_column_f4_pair<0>(value, out[0], out[2]);
    product_column_f4_pair<1>(value, out[1], out[3]);
}

// U[e][s][r] = (G g G^T)[e / 4][e % 4] for the 3x3 weights g = tap(r, s, kh, kw)
// of result channel r and source channel s; the padding channels of each row
// are zero. A vector of result channels at a time: their 9 taps are gathered
// into lanes, transformed together and stored as whole vectors of a row.
template <class T, class Tap>
void transform_weights(const winograd_geometry<T>& geometry, Tap&& tap, T* transformed)
{
    using vector = simd<T>;
    constexpr std::size_t width = vector::size;
    const std::size_t sources = geometry.source_channels, results = geometry.result_channels;
    const std::size_t stride = geometry.result_stride, plane = geometry.weight_plane();
    const vector half(T(0.5));
    alignas(buffer_alignment) T lanes[9][width];
    for (std::size_t r0 = 0; r0 < stride; r0 += width) {
        const std::size_t used = std::min(width, results - r0);
        for (std::size_t s = 0; s < sources; ++s) {
            for (std::size_t k = 0; k < 9; ++k) {
                for (std::size_t lane = 0; lane < used; ++lane) lanes[k][lane] = tap(r0 + lane, s, k / 3, k % 3);
                for (std::size_t lane = used; lane < width; ++lane) lanes[k][lane] = T(0);
            }
            vector g[3][3];
            PETRA_UNROLL(9)
            for (std::size_t k = 0; k < 9; ++k) g[k / 3][k % 3] = vector::load_aligned(lanes[k]);
            if (geometry.output_tile == 4) {
                transform_weights_f4(g, plane, transformed + s * stride + r0);
                continue;
            }
            vector rows[4][3]; // G g
            PETRA_UNROLL(3)
            for (std::size_t k = 0; k < 3; ++k) {
                rows[0][k] = g[0][k];
                rows[1][k] = half * (g[0][k] + g[1][k] + g[2][k]);
                rows[2][k] = half * (g[0][k] - g[1][k] + g[2][k]);
                rows[3][k] = g[2][k];
            }
            PETRA_UNROLL(4)
            for (std::size_t i = 0; i < 4; ++i) { // (G g) G^T
                T* out = transformed + i * 4 * plane + s * stride + r0;
                rows[i][0].store_aligned(out);
                (half * (rows[i][0] + rows[i][1] + rows[i][2])).store_aligned(out + plane);
                (half * (rows[i][0] - rows[i][1] + rows[i][2])).store_aligned(out + 2 * plane);
                rows[i][2].store_aligned(out + 3 * plane);
            }
        }
    }
}

// Image `image` of source (NCHW) into the bordered, pixel-major buffer of
// one image: its pixel (y, x) at bordered pixel (y + 1) * bordered_width + x
// + 1, its channels contiguous. The border and the padding channels are
// zero from the call's start and never written. With a map, each value goes
// in mapped (input_map.hpp). The kernels gather and transform one image at
// a time, so that one image's buffer (57 KiB at 16 channels, 28x28) is
// written and read again while it is in the core's caches, and the
// scratch holds one image instead of a group (against a group's buffer,
// filled whole before its transform, the forwards and input gradients of a
// training step moved within 2% either way on an Intel Xeon, model 167).
template <class T>
void gather_image(const winograd_geometry<T>& geometry, const T* source, std::size_t image, T* bordered,
                  affine_relu_map<T> map)
{
    const std::size_t stride = geometry.source_stride, pixels = geometry.pixels();
    transpose_channels_to_rows(source + image * geometry.source_channels * pixels, pixels, geometry.source_channels,
                               pixels, bordered + (geometry.bordered_width + 1) * stride,
                               pixel_rows{geometry.width, geometry.bordered_width * stride, stride}, map);
}

// Row R of (B^T d) B (F(4x4, 3x3)) for every tile of a row of tiles and one
// vector of channels: first_patch is the row of tiles' first bordered pixel
// (bordered rows `row` values apart, pixels `stride` apart), first_out its
// first tile's V values (tiles `stride` apart, the 36 products `plane`
// apart). The tile's six columns' row R of B^T d, then their B: the first
// two columns' values come from the tile before.
template <std::size_t R, class T>
PETRA_ALWAYS_INLINE void transform_patch_row_f4(const T* first_patch, std::size_t row, std::size_t stride,
                                                std::size_t tile_columns, T* first_out, std::size_t plane)
{
    using vector = simd<T>;
    const auto column = [row](const T* at) {
        return patch_column_f4_row<R, vector>([at, row](std::size_t k) { return vector::load_aligned(at + k * row); });
    };
    vector columns[6];
    columns[4] = column(first_patch);
    columns[5] = column(first_patch + stride);
    for (std::size_t tx = 0; tx < tile_columns; ++tx) {
        const T* patch = first_patch + 4 * tx * stride;
        columns[0] = columns[4];
        columns[1] = columns[5];
        PETRA_UNROLL(6)
        for (std::size_t k = 2; k < 6; ++k) columns[k] = column(patch + k * stride);
        vector transformed[6];
        patch_column_f4(columns, transformed);
        T* out = first_out + tx * stride + R * 6 * plane;
        PETRA_UNROLL(6)
        for (std::size_t k = 0; k < 6; ++k) transformed[k].store_aligned(out + k * plane);
    }
}

// V[e][t][s] = (B^T d B)[e / 4][e % 4] for every tile t of image i of the
// group, tile (ty, tx) t = (i * tile_rows + ty) * tile_columns + tx, whose
// patch starts at bordered pixel (output_tile ty, output_tile tx) of the
// image's bordered pixels (gather_image) at bordered (F(2x2, 3x3): a
// patch is 4x4 bordered pixels), or (B^T d B)[e / 6][e % 6] (F(4x4, 3x3):
// 6x6 pixels). B^T d is taken column by column, and the patches of a row
// of tiles overlap by two columns: each tile takes its first two columns'
// B^T d from the tile before it, so that every column of a row of tiles is
// loaded and transformed once, not twice where tiles meet (the same values:
// the same operations on the same inputs). On a Zen 5 core (kernels alone,
// batch 64, 9 alternated runs) the forward and input gradient ran 1.08-1.10
// times faster at 28x28 x 16 channels (F(4x4, 3x3)), 1.04-1.06 at 14x14
// and 7x7, the weight gradient (F(2x2, 3x3)) 1.01-1.05.
//
// F(4x4, 3x3) goes one row of B^T d at a time (patch_column_f4_row: the
// same bits): a row of the six columns of a tile is six vectors, where the
// whole B^T d of a tile is 36, more than the registers hold; the spilled
// columns, their copies from tile to tile and their reloads took more stores
// than the 36 of V each tile stores. The columns' values are loaded again
// for each row, from the row of tiles' bordered rows (11.5 KiB at 16
// channels, 28x28: in L1). The sizes are read into locals before the loops:
// a vector store may alias anything, so a size read through a reference
// would be read again after every store. With transform_products' pairs of
// rows, on a Zen 5 core the forwards and input gradients ran 1.07-1.13
// times faster alone (medians of 7 alternated runs' ratios, the three
// sizes), 1.04-1.10 in a training step (bench/RESULTS.md).
template <class T>
void transform_patches(const winograd_geometry<T>& geometry, const T* bordered, std::size_t i, T* patches)
{
    using vector = simd<T>;
    const std::size_t stride = geometry.source_stride, plane = geometry.patch_plane();
    const std::size_t row = geometry.bordered_width * stride, step = geometry.output_tile;
    const std::size_t tile_rows = geometry.tile_rows, tile_columns = geometry.tile_columns;
    if (step == 4) {
        for (std::size_t ty = 0; ty < tile_rows; ++ty) {
            const T* first_patch = bordered + 4 * ty * row;
            T* first_out = patches + (i * tile_rows + ty) * tile_columns * stride;
            for (std::size_t c = 0; c < stride; c += vector::size) {
                [&]<std::size_t... R>(std::index_sequence<R...>)
                {
                    (transform_patch_row_f4<R>(first_patch + c, row, stride, tile_columns, first_out + c, plane), ...);
                }
                (std::make_index_sequence<6>{});
            }
        }
        return;
    }
    for (std::size_t ty = 0; ty < tile_rows; ++ty) {
        const T* first_patch = bordered + step * ty * row;
        T* first_out = patches + (i * tile_rows + ty) * tile_columns * stride;
        for (std::size_t c = 0; c < stride; c += vector::size) {
            const auto column = [row](const T* at, vector(&out)[4]) { // B^T d
                const vector d[4] = {vector::load_aligned(at), vector::load_aligned(at + row),
                                     vector::load_aligned(at + 2 * row), vector::load_aligned(at + 3 * row)};
                out[0] = d[0] - d[2];
                out[1] = d[1] + d[2];
                out[2] = d[2] - d[1];
                out[3] = d[1] - d[3];
            };
            vector b[4][4]; // B^T d, column by column: b[k][r] row r of column k
            column(first_patch + c, b[2]);
            column(first_patch + stride + c, b[3]);
            for (std::size_t tx = 0; tx < tile_columns; ++tx) {
                const T* patch = first_patch + step * tx * stride + c;
                PETRA_UNROLL(4)
                for (std::size_t k = 0; k < 4; ++k) b[0][k] = b[2][k];
                PETRA_UNROLL(4)
                for (std::size_t k = 0; k < 4; ++k) b[1][k] = b[3][k];
                column(patch + 2 * stride, b[2]);
                column(patch + 3 * stride, b[3]);
                T* out = first_out + tx * stride + c;
                PETRA_UNROLL(4)
                for (std::size_t r = 0; r < 4; ++r) { // (B^T d) B
                    (b[0][r] - b[2][r]).store_aligned(out + (r * 4 + 0) * plane);
                    (b[1][r] + b[2][r]).store_aligned(out + (r * 4 + 1) * plane);
                    (b[2][r] - b[1][r]).store_aligned(out + (r * 4 + 2) * plane);
                    (b[1][r] - b[3][r]).store_aligned(out + (r * 4 + 3) * plane);
                }
            }
        }
    }
}

// The micro-kernel of the 16 products and of the weight gradient's sums:
//   out[r][v] (+)= sum over k < depth of a(r, k) * b[k * b_stride + v * W]
// for Rows rows r and Vectors vectors v, each a(r, k) broadcast against the
// vectors of b's row k. a(r, k) = a[r * a_stride + k] (rows a_stride
// apart: the products, whose rows are tiles) or, with RowsAdjacent,
// a[r + k * a_stride] (the gradient, whose rows are channels of one tile).
// Accumulate adds to out instead of overwriting it. A nonzero FixedStride
// is a_stride known at compile time: every row is then a constant offset
// from one pointer. With a run-time stride g++ keeps one offset per row, 24
// of them in 16 general registers, and spills them: on a Zen 5 core the
// products of 16 channels ran at 36% of the FMA peak, 1.2-1.4x slower than
// with the stride fixed (bench/RESULTS.md, "Convolutions").
template <class T, std::size_t Rows, std::size_t Vectors, bool RowsAdjacent, bool Accumulate,
          std::size_t FixedStride = 0>
inline void broadcast_block(std::size_t depth, const T* __restrict a, std::size_t a_stride, const T* __restrict b,
                            std::size_t b_stride, T* __restrict out, std::size_t out_stride)
{
    using vector = simd<T>;
    if constexpr (FixedStride != 0) a_stride = FixedStride;
    vector sums[Rows][Vectors];
    PETRA_UNROLL(24)
    for (std::size_t r = 0; r < Rows; ++r) {
        PETRA_UNROLL(4)
        for (std::size_t v = 0; v < Vectors; ++v) {
            sums[r][v] = Accumulate ? vector::load_aligned(out + r * out_stride + v * vector::size) : vector(T(0));
        }
    }
    for (std::size_t k = 0; k < depth; ++k) {
        if (RowsAdjacent && k + 8 < depth) {
            // The weight gradient's rows eight tiles ahead, to L1: each row
            // of V and dM serves one pass and comes from L2, where the loop
            // waited for it. On an Intel Xeon (model 167) the weight
            // gradients at 16 and 32 channels ran 1.03-1.08 times faster
            // in a training step (4 to 16 rows ahead measured alike; the
            // same for the products' rows slowed the input gradients).
            // Only rows that exist: a pointer past the arrays is not formed.
            __builtin_prefetch(a + (k + 8) * a_stride, 0, 3);
            __builtin_prefetch(b + (k + 8) * b_stride, 0, 3);
        }
        vector w[Vectors];
        PETRA_UNROLL(4)
        for (std::size_t v = 0; v < Vectors; ++v) w[v] = vector::load_aligned(b + k * b_stride + v * vector::size);
        PETRA_UNROLL(24)
        for (std::size_t r = 0; r < Rows; ++r) {
            const vector value(RowsAdjacent ? a[r + k * a_stride] : a[r * a_stride + k]);
            PETRA_UNROLL(4)
            for (std::size_t v = 0; v < Vectors; ++v) sums[r][v] = fused_multiply_add(value, w[v], sums[r][v]);
        }
    }
    PETRA_UNROLL(24)
    for (std::size_t r = 0; r < Rows; ++r) {
        PETRA_UNROLL(4)
        for (std::size_t v = 0; v < Vectors; ++v) sums[r][v].store_aligned(out + r * out_stride + v * vector::size);
    }
}

template <class T, std::size_t Rows, std::size_t Vectors, std::size_t FixedStride>
void winograd_vector_group_products(const winograd_geometry<T>& geometry, const T* patches, const T* weights,
                                    std::size_t v0, T* products, prefetch_stream& prefetch)
{
    constexpr std::size_t rows = Rows;
    const std::size_t width = simd_width<T>;
    const std::size_t tile_products = geometry.tile_products();
    for (std::size_t e = 0; e < geometry.products_per_tile; ++e) {
        const T* v_e = patches + e * geometry.patch_plane();
        const T* u_e = weights + e * geometry.weight_plane() + v0 * width;
        T* m_e = products + e * geometry.result_stride + v0 * width;
        for (std::size_t t = 0; t < geometry.group_tiles; t += rows) {
            broadcast_block<T, rows, Vectors, false, false, FixedStride>(
                geometry.source_channels, v_e + t * geometry.source_stride, geometry.source_stride, u_e,
                geometry.result_stride, m_e + t * tile_products, tile_products);
            prefetch.advance();
        }
    }
}

// run.template operator()<Fixed>() with Fixed = stride where the stride is
// 1, 2 or 4 vectors of T (the reference network's 16, 32 and 64 channels in
// float), and Fixed = 0 (the stride read at run time) otherwise: the
// kernels below take a fixed stride as a template argument.
template <class T, class Run>
void with_fixed_stride(std::size_t stride, Run&& run)
{
    constexpr std::size_t width = simd_width<T>;
    switch (stride) {
    case width: return run.template operator()<width>();
    case 2 * width: return run.template operator()<2 * width>();
    case 4 * width: return run.template operator()<4 * width>();
    default: return run.template operator()<0>();
    }
}

// The same with the patches' row stride fixed at compile time where it can,
// in blocks of rows_for(Vectors) rows, or of the geometry's one_vector_rows
// where the result channels take one vector.
template <class T, std::size_t Vectors>
void winograd_vector_group_products(const winograd_geometry<T>& geometry, const T* patches, const T* weights,
                                    std::size_t v0, T* products, prefetch_stream& prefetch)
{
    using blocking = winograd_blocking<T>;
    const auto run = [&]<std::size_t Rows>() {
        with_fixed_stride<T>(geometry.source_stride, [&]<std::size_t Fixed>() {
            winograd_vector_group_products<T, Rows, Vectors, Fixed>(geometry, patches, weights, v0, products, prefetch);
        });
    };
    if constexpr (Vectors == 1) {
        if (geometry.result_stride == simd_width<T>) {
            constexpr auto rows = blocking::one_vector_rows;
            if (geometry.one_vector_rows == rows[1]) return run.template operator()<rows[1]>();
            if (geometry.one_vector_rows == rows[2]) return run.template operator()<rows[2]>();
            return run.template operator()<rows[0]>();
        }
    }
    run.template operator()<blocking::rows_for(Vectors)>();
}

// M_e = V_e U_e for the 16 e, in passes of up to max_vectors vectors of
// result channels, prefetching the bytes of `next` (the next group's
// images) over the first pass's blocks.
template <class T>
void multiply_transformed(const winograd_geometry<T>& geometry, const T* patches, const T* weights, T* products,
                          std::span<const std::byte> next)
{
    using blocking = winograd_blocking<T>;
    constexpr std::size_t max_vectors = blocking::max_vectors;
    const std::size_t vectors = geometry.result_stride / simd_width<T>;
    const std::size_t first_rows =
        vectors == 1 ? geometry.one_vector_rows : blocking::rows_for(std::min(vectors, max_vectors));
    prefetch_stream prefetch(next, geometry.products_per_tile * ((geometry.group_tiles + first_rows - 1) / first_rows));
    std::size_t v0 = 0;
    for (; v0 + max_vectors <= vectors; v0 += max_vectors)
        winograd_vector_group_products<T, max_vectors>(geometry, patches, weights, v0, products, prefetch);
    const std::size_t rest = vectors - v0;
    ([&]<std::size_t... V>(std::index_sequence<V...>) {
        ((rest == V + 1 ? winograd_vector_group_products<T, V + 1>(geometry, patches, weights, v0, products, prefetch)
                        : void()),
         ...);
    })(std::make_index_sequence<max_vectors - 1>{});
}

// The 2x2 results of every tile of image `image` of the group, A^T M A, into
// results (that image's pixels, pixel-major, result_stride values each);
// tiles past the image's edge (odd sizes) store only their inner part. A
// nonzero FixedStride is result_stride known at compile time, so that a
// tile's products are constant displacements from one pointer.
template <class T, std::size_t FixedStride>
void transform_products(const winograd_geometry<T>& geometry, const T* products, std::size_t image, T* results)
{
    using vector = simd<T>;
    const std::size_t stride = FixedStride != 0 ? FixedStride : geometry.result_stride;
    const std::size_t width = geometry.width, height = geometry.height; // see transform_patches
    const std::size_t tile_rows = geometry.tile_rows, tile_columns = geometry.tile_columns;
    if (geometry.output_tile == 4) {
        // The 4x4 results A^T M A of every tile, of which those inside the
        // image are stored; two rows of A^T M at a time (rows 0 and 2, then
        // 1 and 3: product_column_f4_pair), twelve vectors where the whole
        // of A^T M is 24 and spilled.
        for (std::size_t ty = 0; ty < tile_rows; ++ty) {
            const std::size_t rows = std::min<std::size_t>(4, height - 4 * ty);
            for (std::size_t tx = 0; tx < tile_columns; ++tx) {
                const std::size_t columns = std::min<std::size_t>(4, width - 4 * tx);
                const std::size_t t = (image * tile_rows + ty) * tile_columns + tx;
                const T* m = products + t * 36 * stride; // tile-major: 36 products per tile
                T* out = results + (4 * ty * width + 4 * tx) * stride;
                for (std::size_t c = 0; c < stride; c += vector::size) {
                    const auto store_rows = [&]<std::size_t Pair>(std::size_t row_count, std::size_t column_count) {
                        vector pair[2][6]; // rows Pair and Pair + 2 of A^T M, column by column
                        PETRA_UNROLL(6)
                        for (std::size_t k = 0; k < 6; ++k) {
                            product_column_f4_pair<Pair>(
                                [&](std::size_t r) { return vector::load_aligned(m + (r * 6 + k) * stride + c); },
                                pair[0][k], pair[1][k]);
                        }
                        PETRA_UNROLL(2)
                        for (std::size_t j = 0; j < 2; ++j) { // (A^T M) A, row by row
                            const std::size_t r = Pair + 2 * j;
                            if (r >= row_count) break;
                            vector result[4];
                            product_column_f4(pair[j], result);
                            for (std::size_t k = 0; k < column_count; ++k) {
                                result[k].store_aligned(out + (r * width + k) * stride + c);
                            }
                        }
                    };
                    // Whole tiles with the counts known, the loops unrolled.
                    if (rows == 4 && columns == 4) {
                        store_rows.template operator()<0>(4, 4);
                        store_rows.template operator()<1>(4, 4);
                    } else {
                        store_rows.template operator()<0>(rows, columns);
                        store_rows.template operator()<1>(rows, columns);
                    }
                }
            }
        }
        return;
    }
    for (std::size_t ty = 0; ty < tile_rows; ++ty) {
        for (std::size_t tx = 0; tx < tile_columns; ++tx) {
            const std::size_t t = (image * tile_rows + ty) * tile_columns + tx;
            const T* m = products + t * 16 * stride; // tile-major: 16 products per tile
            const std::size_t y = 2 * ty, x = 2 * tx;
            const bool second_row = y + 1 < height, second_column = x + 1 < width;
            T* out = results + (y * width + x) * stride;
            for (std::size_t c = 0; c < stride; c += vector::size) {
                vector a[2][4]; // A^T M
                PETRA_UNROLL(4)
                for (std::size_t k = 0; k < 4; ++k) {
                    const vector m0 = vector::load_aligned(m + (0 * 4 + k) * stride + c);
                    const vector m1 = vector::load_aligned(m + (1 * 4 + k) * stride + c);
                    const vector m2 = vector::load_aligned(m + (2 * 4 + k) * stride + c);
                    const vector m3 = vector::load_aligned(m + (3 * 4 + k) * stride + c);
                    a[0][k] = m0 + m1 + m2;
                    a[1][k] = m1 - m2 - m3;
                }
                (a[0][0] + a[0][1] + a[0][2]).store_aligned(out + c);
                if (second_column) (a[0][1] - a[0][2] - a[0][3]).store_aligned(out + stride + c);
                if (second_row) {
                    T* below = out + width * stride;
                    (a[1][0] + a[1][1] + a[1][2]).store_aligned(below + c);
                    if (second_column) (a[1][1] - a[1][2] - a[1][3]).store_aligned(below + stride + c);
                }
            }
        }
    }
}

// transform_products with the result stride fixed at compile time where it
// can (with_fixed_stride).
template <class T>
void transform_products(const winograd_geometry<T>& geometry, const T* products, std::size_t image, T* results)
{
    with_fixed_stride<T>(geometry.result_stride, [&]<std::size_t Fixed>() {
        transform_products<T, Fixed>(geometry, products, image, results);
    });
}

// The batch mean and biased variance of every result channel of a
// correlation (channel_statistics), gathered from each image's results while
// they are in the core's caches, pixel-major with the channels along the
// vectors, so that the batch normalisation after a convolution need not read
// the convolution's output again (a pass over 3.2 MB per 28x28 convolution
// of the reference network, from beyond the L2 cache). Computed as
// channel_mean_variance computes a batch of more than one group: every
// value less its channel's first value (the shift), each group (here an
// image) in two passes (the sums, then the squared deviations from the
// group's mean), and the groups merged in order by the identity
// channel_mean_variance states, whose terms do not cancel. Only the
// grouping and the order of the additions differ (images one by one, four
// partial sums per vector of channels), so the values round differently
// from channel_mean_variance's, by errors of the same size. For a batch of
// at least one image.
template <class T>
class result_statistics {
public:
    result_statistics(const winograd_geometry<T>& geometry, channel_statistics<T> out, scratch_source& scratch)
        : geometry_(geometry), out_(out),
          // Taken whether or not they are asked for, so that a caller's region
          // sized by the demand (ask_winograd_scratch) is used to its end.
          running_(scratch.take<winograd_statistics_tag, T>(3 * geometry.result_stride))
    {}

    // Adds image `image` of the batch (images are added in order, from 0),
    // whose results are at results (transform_products).
    void add(const T* results, std::size_t image)
    {
        if (!out_) return;
        using vector = simd<T>;
        const std::size_t stride = geometry_.result_stride, pixels = geometry_.pixels();
        const T count_here = T(pixels), count_before = T(image * pixels);
        T* shift = running_;
        T* sum = running_ + stride;
        T* deviations = running_ + 2 * stride;
        const std::size_t unrolled = pixels - pixels % 4;
        for (std::size_t c = 0; c < stride; c += vector::size) {
            if (image == 0) vector::load_aligned(results + c).store_aligned(shift + c);
            const vector first = vector::load_aligned(shift + c);
            const auto value = [&](std::size_t p) { return vector::load_aligned(results + p * stride + c) - first; };
            vector partial[4] = {vector(T(0)), vector(T(0)), vector(T(0)), vector(T(0))};
            for (std::size_t p = 0; p < unrolled; p += 4) {
                PETRA_UNROLL(4)
                for (std::size_t k = 0; k < 4; ++k) partial[k] += value(p + k);
            }
            for (std::size_t p = unrolled; p < pixels; ++p) partial[0] += value(p);
            const vector image_sum = (partial[0] + partial[1]) + (partial[2] + partial[3]);
            const vector image_mean = image_sum / vector(count_here);
            for (vector& v : partial) v = vector(T(0));
            const auto deviation = [&](std::size_t p) { return value(p) - image_mean; };
            for (std::size_t p = 0; p < unrolled; p += 4) {
                PETRA_UNROLL(4)
                for (std::size_t k = 0; k < 4; ++k) {
                    const vector d = deviation(p + k);
                    partial[k] = fused_multiply_add(d, d, partial[k]);
                }
            }
            for (std::size_t p = unrolled; p < pixels; ++p) {
                const vector d = deviation(p);
                partial[0] = fused_multiply_add(d, d, partial[0]);
            }
            const vector image_deviations = (partial[0] + partial[1]) + (partial[2] + partial[3]);
            if (image == 0) {
                image_sum.store_aligned(sum + c);
                image_deviations.store_aligned(deviations + c);
                continue;
            }
            const vector running_sum = vector::load_aligned(sum + c);
            const vector difference = image_mean - running_sum / vector(count_before);
            const vector weight(count_before * count_here / (count_before + count_here));
            (vector::load_aligned(deviations + c) + (image_deviations + difference * difference * weight))
                .store_aligned(deviations + c);
            (running_sum + image_sum).store_aligned(sum + c);
        }
    }

    // The batch's mean and variance into the outputs, once every image is added.
    void finish() const
    {
        if (!out_ || geometry_.batch == 0) return;
        const std::size_t stride = geometry_.result_stride;
        const T count = T(geometry_.batch * geometry_.pixels());
        for (std::size_t c = 0; c < geometry_.result_channels; ++c) {
            out_.mean[c] = running_[c] + running_[stride + c] / count;
            out_.variance[c] = running_[2 * stride + c] / count;
        }
    }

private:
    const winograd_geometry<T>& geometry_;
    channel_statistics<T> out_;
    T* running_; // shift, sum and deviations, result_stride values each
};

// The zeros of the bordered buffer and of V that no image or group
// overwrites, set at a call's start (the buffers are shared with calls of
// other shapes): in the bordered image the border, and the padding channels
// (where the channels do not fill their vectors: then the whole image); in
// each plane of V the rows past those a full group writes (rows of the last
// block, whose products the correlation never reads and the weight gradient
// does not multiply: zero keeps NaN out of them; a partial group leaves the
// previous group's values there, as zeroing whole at the call's start did)
// and the slack. Zeroing both buffers whole instead, up to 700 KB
// per call, made an exact training step 1.03 times slower on an Intel Xeon
// core (medians of 7 alternated pairs; same results to the bit).
template <class T>
void zero_unwritten(const winograd_geometry<T>& geometry, T* bordered, T* patches)
{
    const std::size_t stride = geometry.source_stride, row = geometry.bordered_width * stride;
    const std::size_t rows = geometry.bordered_pixels / geometry.bordered_width;
    if (stride != geometry.source_channels) {
        std::fill(bordered, bordered + geometry.bordered_count(), T(0));
    } else {
        std::fill(bordered, bordered + row, T(0)); // row 0
        for (std::size_t y = 1; y <= geometry.height; ++y) {
            T* line = bordered + y * row;
            std::fill(line, line + stride, T(0));                              // pixel 0
            std::fill(line + (geometry.width + 1) * stride, line + row, T(0)); // past the edge
        }
        std::fill(bordered + (geometry.height + 1) * row, bordered + rows * row, T(0)); // the rows below
    }
    const std::size_t written = geometry.group_images * geometry.tiles * stride, plane = geometry.patch_plane();
    for (std::size_t e = 0; e < geometry.products_per_tile; ++e)
        std::fill(patches + e * plane + written, patches + (e + 1) * plane, T(0));
}

// For every image n, result channel r and pixel (y, x) of a height x width
// image:
//   result[n][r][y][x] = sum over source channels s and kh, kw < 3 of
//       tap(r, s, kh, kw) * source[n][s][y + kh - 1][x + kw - 1]  (+ beta * result)
// reading zero outside the image (3x3, stride 1, padding 1), source's
// values mapped by source_map where it is given. result is not read when
// beta == 0. Where result_statistics_out is given (with beta == 0 only),
// the batch mean and variance of each result channel go there too
// (result_statistics).
template <class T, class Tap>
void winograd_correlation(const winograd_geometry<T>& geometry, const T* source, Tap&& tap, T* result, T beta,
                          scratch_source& scratch, affine_relu_map<T> source_map = {},
                          channel_statistics<T> result_statistics_out = {})
{
    T* bordered = scratch.take<winograd_bordered_tag, T>(geometry.bordered_count());
    T* patches = scratch.take<winograd_patches_tag, T>(geometry.patches_count());
    T* weights = scratch.take<winograd_weights_tag, T>(geometry.weights_count());
    T* products = scratch.take<winograd_products_tag, T>(geometry.products_count());
    T* results = scratch.take<winograd_results_tag, T>(geometry.results_count());
    T* staged = beta == T(0) ? nullptr : scratch.take<winograd_staged_tag, T>(geometry.staged_count());
    if (result_statistics_out && beta != T(0)) {
        raise_error(error_kind::invalid_argument,
                    "petra::kernels: a correlation that accumulates onto its result (beta != 0) does not give "
                    "the result's statistics");
    }
    result_statistics<T> statistics(geometry, result_statistics_out, scratch);
    zero_unwritten(geometry, bordered, patches);
    transform_weights(geometry, tap, weights);
    const std::size_t pixels = geometry.pixels(), channels = geometry.result_channels;
    const std::size_t image_values = geometry.source_channels * pixels;
    for (std::size_t first = 0; first < geometry.batch; first += geometry.group_images) {
        const std::size_t count = std::min(geometry.group_images, geometry.batch - first);
        for (std::size_t i = 0; i < count; ++i) {
            gather_image(geometry, source, first + i, bordered, source_map);
            transform_patches(geometry, bordered, i, patches);
        }
        const std::size_t next_count = std::min(geometry.group_images, geometry.batch - first - count);
        multiply_transformed(geometry, patches, weights, products,
                             images_bytes(source, image_values, first + count, next_count));
        for (std::size_t i = 0; i < count; ++i) {
            transform_products(geometry, products, i, results);
            statistics.add(results, first + i);
            T* image = result + (first + i) * channels * pixels;
            if (beta == T(0)) {
                transpose_channels(results, geometry.result_stride, pixels, channels, image, pixels);
            } else {
                transpose_channels(results, geometry.result_stride, pixels, channels, staged, pixels);
                store_row(channels * pixels, staged, image, beta);
            }
        }
    }
    statistics.finish();
}

// The weight gradient in the same form. With M = U .* V the forward
// pass's products, results = A^T M A; so for a result gradient dY of a tile,
// dM = A dY A^T, the gradient of U is the sum over tiles and images of
// dM .* V, and that of the 3x3 weights g is G^T dU G. The sums over tiles are
// 16 GEMMs dU_e += V_e^T dM_e (36 in F(4x4, 3x3)), each accumulating a block
// of source channels (broadcast from V's rows, where they are contiguous)
// times vectors of result channels (from dM's rows) over every tile of a
// group.

template <class T>
struct winograd_gradient_sizes {
    // Source channels of dU's planes: a multiple of every row count a pass
    // uses (the blocking's rows_for and the powers of two below them, all of
    // which divide twice the accumulator count), so that every block writes
    // rows of its own plane.
    static constexpr std::size_t sum_rows(const winograd_geometry<T>& geometry)
    {
        const std::size_t rows = 2 * winograd_blocking<T>::accumulators;
        return (geometry.source_stride + rows - 1) / rows * rows;
    }
    static constexpr std::size_t sums_count(const winograd_geometry<T>& geometry)
    {
        return geometry.products_per_tile * sum_rows(geometry) * geometry.result_stride;
    }
    // One image's result gradient, pixel-major, over whole tiles (the rows
    // and columns past an odd image's edge are zero).
    static constexpr std::size_t tiles_count(const winograd_geometry<T>& geometry)
    {
        return geometry.output_tile * geometry.output_tile * geometry.tiles * geometry.result_stride;
    }
    // Where dM's values lie in the products' buffer: dM[e][t] at e *
    // dm_plane + t * dm_tile. Where the result channels take one vector,
    // tile by tile (a tile's 16 values one after another, as the
    // correlation's M), so that the transform stores each tile's 16 vectors
    // to consecutive cache lines: at 28x28 x 16 channels the weight gradient
    // ran 1.05 times faster alone than with dM's 16 planes apart (Zen 5, 9
    // alternated bench_kernels runs). Wider, plane by plane: tile by tile,
    // the 14x14 x 32 and 7x7 x 64 ones ran 0.96 and 0.92 times as fast.
    static constexpr bool dm_by_tile(const winograd_geometry<T>& geometry)
    {
        return geometry.result_stride == simd_width<T>;
    }
    static constexpr std::size_t dm_plane(const winograd_geometry<T>& geometry)
    {
        return dm_by_tile(geometry) ? geometry.result_stride : geometry.product_plane();
    }
    static constexpr std::size_t dm_tile(const winograd_geometry<T>& geometry)
    {
        return dm_by_tile(geometry) ? geometry.tile_products() : geometry.result_stride;
    }
};

template <class T>
constexpr void ask_winograd_gradient_scratch(scratch_demand& demand, const winograd_geometry<T>& geometry)
{
    ask_winograd_common_scratch(demand, geometry);
    demand.template ask<winograd_gradient_tiles_tag, T>(winograd_gradient_sizes<T>::tiles_count(geometry));
    demand.template ask<winograd_gradient_sums_tag, T>(winograd_gradient_sizes<T>::sums_count(geometry));
}

// A y for the four values y of a column of a result gradient's tile, A the
// transpose of F(4x4, 3x3)'s A^T: (y0, y0 + y1 + y2 + y3, y0 - y1 + y2 - y3,
// y0 + 2 y1 + 4 y2 + 8 y3, y0 - 2 y1 + 4 y2 - 8 y3, y3).
template <class V>
PETRA_ALWAYS_INLINE void gradient_column_f4(const V (&y)[4], V (&out)[6])
{
    using T = typename V::value_type;
    const V even = y[0] + y[2], odd = y[1] + y[3];
    const V outer_even = fused_multiply_add(V(T(4)), y[2], y[0]);
    const V outer_odd = fused_multiply_add(V(T(8)), y[3], y[1] + y[1]);
    out[0] = y[0];
    out[1] = even + odd;
    out[2] = even - odd;
    out[3] = outer_even + outer_odd;
    out[4] = outer_even - outer_odd;
    out[5] = y[3];
}

// dM[e][t][r] = (A dY A^T)[e / 4][e % 4] (in F(4x4, 3x3) [e / 6][e % 6])
// for the tiles of image `image` of the group (the image's result gradient
// in `tiles`, pixel-major over whole tiles), laid out as
// winograd_gradient_sizes::dm_plane and dm_tile say.
template <class T>
void transform_result_gradient(const winograd_geometry<T>& geometry, const T* tiles, std::size_t image, T* products)
{
    using vector = simd<T>;
    using sizes = winograd_gradient_sizes<T>;
    const std::size_t stride = geometry.result_stride;
    const std::size_t plane = sizes::dm_plane(geometry), tile = sizes::dm_tile(geometry);
    const std::size_t tile_rows = geometry.tile_rows, tile_columns = geometry.tile_columns; // see transform_patches
    const std::size_t step = geometry.output_tile, row = step * tile_columns * stride;
    // transform(dy, out, c) for every tile and vector of channels: the
    // tile's dY from dy (rows `row` values apart), its dM to out.
    const auto for_each_tile = [&](auto&& transform) {
        for (std::size_t ty = 0; ty < tile_rows; ++ty) {
            for (std::size_t tx = 0; tx < tile_columns; ++tx) {
                const std::size_t t = (image * tile_rows + ty) * tile_columns + tx;
                const T* dy = tiles + step * ty * row + step * tx * stride;
                T* out = products + t * tile;
                for (std::size_t c = 0; c < stride; c += vector::size) transform(dy, out, c);
            }
        }
    };
    if (step == 4) {
        for_each_tile([&](const T* dy, T* out, std::size_t c) PETRA_ALWAYS_INLINE_LAMBDA {
            vector columns[4][6]; // A dY, column by column
            PETRA_UNROLL(4)
            for (std::size_t k = 0; k < 4; ++k) {
                const vector column[4] = {vector::load_aligned(dy + k * stride + c),
                                          vector::load_aligned(dy + row + k * stride + c),
                                          vector::load_aligned(dy + 2 * row + k * stride + c),
                                          vector::load_aligned(dy + 3 * row + k * stride + c)};
                gradient_column_f4(column, columns[k]);
            }
            PETRA_UNROLL(6)
            for (std::size_t i = 0; i < 6; ++i) { // (A dY) A^T, row by row
                const vector values[4] = {columns[0][i], columns[1][i], columns[2][i], columns[3][i]};
                vector transformed[6];
                gradient_column_f4(values, transformed);
                PETRA_UNROLL(6)
                for (std::size_t j = 0; j < 6; ++j) transformed[j].store_aligned(out + (i * 6 + j) * plane + c);
            }
        });
        return;
    }
    for_each_tile([&](const T* dy, T* out, std::size_t c) PETRA_ALWAYS_INLINE_LAMBDA {
        const vector d00 = vector::load_aligned(dy + c), d01 = vector::load_aligned(dy + stride + c);
        const vector d10 = vector::load_aligned(dy + row + c), d11 = vector::load_aligned(dy + row + stride + c);
        // A dY: rows dY0, dY0 + dY1, dY0 - dY1, -dY1.
        const vector rows[4][2] = {{d00, d01}, {d00 + d10, d01 + d11}, {d00 - d10, d01 - d11}, {-d10, -d11}};
        PETRA_UNROLL(4)
        for (std::size_t i = 0; i < 4; ++i) { // (A dY) A^T, the same on the columns
            (rows[i][0]).store_aligned(out + (i * 4 + 0) * plane + c);
            (rows[i][0] + rows[i][1]).store_aligned(out + (i * 4 + 1) * plane + c);
            (rows[i][0] - rows[i][1]).store_aligned(out + (i * 4 + 2) * plane + c);
            (-rows[i][1]).store_aligned(out + (i * 4 + 3) * plane + c);
        }
    });
}

template <class T, std::size_t Rows, std::size_t Vectors>
void winograd_vector_group_gradient(const winograd_geometry<T>& geometry, const T* patches, const T* products,
                                    std::size_t v0, std::size_t depth, T* sums)
{
    using sizes = winograd_gradient_sizes<T>;
    const std::size_t width = simd_width<T>, sum_rows = sizes::sum_rows(geometry);
    const std::size_t dm_plane = sizes::dm_plane(geometry), dm_tile = sizes::dm_tile(geometry);
    for (std::size_t e = 0; e < geometry.products_per_tile; ++e) {
        const T* v_e = patches + e * geometry.patch_plane();
        const T* m_e = products + e * dm_plane + v0 * width;
        T* u_e = sums + e * sum_rows * geometry.result_stride + v0 * width;
        for (std::size_t s = 0; s < geometry.source_stride; s += Rows) {
            // sums[s][v] += sum over the group's tiles t of V[t][s] * dM[t][v].
            broadcast_block<T, Rows, Vectors, true, true>(depth, v_e + s, geometry.source_stride, m_e, dm_tile,
                                                          u_e + s * geometry.result_stride, geometry.result_stride);
        }
    }
}

// The block's rows: as many as the registers hold when the last block wastes
// at most a sixteenth of the source channels on rows that do not exist,
// otherwise the largest power of two below if it divides the channels
// (whole vectors of them), or else a vector's width. Measured on the
// reference network's shapes: 16 rows over 16 channels beat 24 (a third
// wasted), 8 over 32 beat 12 (an eighth wasted), 6 over 64 beat 4 (a
// thirty-second wasted, but fewer accumulators).
template <class T, std::size_t Vectors>
void winograd_vector_group_gradient(const winograd_geometry<T>& geometry, const T* patches, const T* products,
                                    std::size_t v0, std::size_t depth, T* sums)
{
    constexpr std::size_t rows = winograd_blocking<T>::rows_for(Vectors);
    constexpr std::size_t power_of_two = std::bit_floor(rows);
    constexpr std::size_t width = std::min(power_of_two, simd_width<T>);
    const std::size_t wasted = (geometry.source_stride + rows - 1) / rows * rows - geometry.source_stride;
    if (wasted * 16 <= geometry.source_stride) {
        winograd_vector_group_gradient<T, rows, Vectors>(geometry, patches, products, v0, depth, sums);
    } else if (geometry.source_stride % power_of_two == 0) {
        winograd_vector_group_gradient<T, power_of_two, Vectors>(geometry, patches, products, v0, depth, sums);
    } else {
        winograd_vector_group_gradient<T, width, Vectors>(geometry, patches, products, v0, depth, sums);
    }
}

// G^T u for the six values u of a row or column of dU, G F(4x4, 3x3)'s (T
// a value or a vector of them).
template <class T>
PETRA_ALWAYS_INLINE void weight_gradient_column_f4(const T (&u)[6], T (&out)[3])
{
    const T sum_12 = u[1] + u[2], sum_34 = u[3] + u[4];
    out[0] = u[0] / T(4) - sum_12 / T(6) + sum_34 / T(24);
    out[1] = (u[2] - u[1]) / T(6) + (u[3] - u[4]) / T(12);
    out[2] = (sum_34 - sum_12) / T(6) + u[5];
}

// grad_weights[r][s][kh][kw] += (G^T dU G)[kh][kw] for the weights of result
// channel r and source channel s (the forward pass's output and input
// channels), summed over every image of source (mapped by source_map where
// it is given) and result_gradient.
//
// In either tile (geometry.output_tile 2 or 4). F(4x4, 3x3) takes 36
// products per 16 results where F(2x2, 3x3) takes 64, at up to ten times
// the rounding error (4e-5 of the largest value at 28x28 x 16 channels,
// batch 64, against 4e-6; test_convolution holds it to the direct form's
// tolerance): on a Zen 5 core 1.33, 1.11 and 1.12 times faster alone at
// 28x28 x 16, 14x14 x 32 and 7x7 x 64 channels (on a Zen 4 core, before
// the transforms and products were reworked, 0.99 to 1.03 times).
template <class T>
void winograd_weight_gradient(const winograd_geometry<T>& geometry, const T* source, const T* result_gradient,
                              T* grad_weights, scratch_source& scratch, affine_relu_map<T> source_map = {})
{
    using sizes = winograd_gradient_sizes<T>;
    T* bordered = scratch.take<winograd_bordered_tag, T>(geometry.bordered_count());
    T* patches = scratch.take<winograd_patches_tag, T>(geometry.patches_count());
    T* products = scratch.take<winograd_products_tag, T>(geometry.products_count());
    T* tiles = scratch.take<winograd_gradient_tiles_tag, T>(sizes::tiles_count(geometry));
    T* sums = scratch.take<winograd_gradient_sums_tag, T>(sizes::sums_count(geometry));
    zero_unwritten(geometry, bordered, patches);
    // dM needs no zeros: each group writes every row its sums read.
    std::fill(tiles, tiles + sizes::tiles_count(geometry), T(0));
    std::fill(sums, sums + sizes::sums_count(geometry), T(0));
    const std::size_t pixels = geometry.pixels(), results = geometry.result_channels;
    const std::size_t stride = geometry.result_stride, tile_row = geometry.output_tile * geometry.tile_columns * stride;
    constexpr std::size_t max_vectors = winograd_blocking<T>::max_vectors;
    const std::size_t vectors = stride / simd_width<T>;
    for (std::size_t first = 0; first < geometry.batch; first += geometry.group_images) {
        const std::size_t count = std::min(geometry.group_images, geometry.batch - first);
        for (std::size_t i = 0; i < count; ++i) {
            gather_image(geometry, source, first + i, bordered, source_map);
            transform_patches(geometry, bordered, i, patches);
            // The result gradient pixel-major, each row into its tile row
            // (the padding channels and the pixels past the edge stay zero).
            transpose_channels_to_rows(result_gradient + (first + i) * results * pixels, pixels, results, pixels, tiles,
                                       pixel_rows{geometry.width, tile_row, stride});
            transform_result_gradient(geometry, tiles, i, products);
        }
        // The sums run over the group's tiles only: the rows past them, to
        // which the correlation's blocks pad a group, would add zeros (a
        // tenth of the products at 14x14 x 32 channels, two images' 98
        // tiles padded to 108; that weight gradient 1.05 times faster in a
        // Zen 5 step, bench/RESULTS.md).
        const std::size_t depth = count * geometry.tiles;
        std::size_t v0 = 0;
        for (; v0 + max_vectors <= vectors; v0 += max_vectors)
            winograd_vector_group_gradient<T, max_vectors>(geometry, patches, products, v0, depth, sums);
        const std::size_t rest = vectors - v0;
        ([&]<std::size_t... V>(std::index_sequence<V...>) {
            ((rest == V + 1 ? winograd_vector_group_gradient<T, V + 1>(geometry, patches, products, v0, depth, sums)
                            : void()),
             ...);
        })(std::make_index_sequence<max_vectors - 1>{});
    }
    const std::size_t sources = geometry.source_channels, sum_rows = sizes::sum_rows(geometry);
    // dg = G^T dU G for a vector of result channels at a time (dU's rows
    // hold them side by side), added to the weights' gradient lane by lane.
    // F(4x4, 3x3)'s G^T has quarters, sixths, twelfths and 24ths: 54 divisions
    // for each pair of channels, which one pair at a time took a fifth of
    // the 7x7 x 64 weight gradient at batch 64 and three quarters at batch 1
    // (Zen 5, bench/RESULTS.md). Each lane computes what the scalars did,
    // operation for operation: F(2x2, 3x3)'s a + b / 2 are the multiply-adds
    // both compilers made of the scalars' expressions (a vector's operators
    // are not contracted by clang++).
    using vector = simd<T>;
    constexpr std::size_t width = vector::size;
    alignas(buffer_alignment) T taps[9][width];
    const auto du_at = [&](std::size_t e, std::size_t s, std::size_t r0) {
        return vector::load_aligned(sums + (e * sum_rows + s) * stride + r0);
    };
    const vector half(T(0.5));
    for (std::size_t s = 0; s < sources; ++s) {
        for (std::size_t r0 = 0; r0 < results; r0 += width) {
            if (geometry.output_tile == 4) { // F(4x4, 3x3)'s G (above transform_weights_f4)
                vector columns[6][3];        // dU G, row by row
                PETRA_UNROLL(6)
                for (std::size_t i = 0; i < 6; ++i) {
                    vector du[6];
                    PETRA_UNROLL(6)
                    for (std::size_t j = 0; j < 6; ++j) du[j] = du_at(i * 6 + j, s, r0);
                    weight_gradient_column_f4(du, columns[i]);
                }
                PETRA_UNROLL(3)
                for (std::size_t k = 0; k < 3; ++k) { // G^T (dU G)
                    const vector column[6] = {columns[0][k], columns[1][k], columns[2][k],
                                              columns[3][k], columns[4][k], columns[5][k]};
                    vector gradient[3];
                    weight_gradient_column_f4(column, gradient);
                    PETRA_UNROLL(3)
                    for (std::size_t a = 0; a < 3; ++a) gradient[a].store_aligned(taps[a * 3 + k]);
                }
            } else {                  // G's rows (1, 0, 0), (1/2, 1/2, 1/2), (1/2, -1/2, 1/2), (0, 0, 1)
                vector columns[4][3]; // dU G
                PETRA_UNROLL(4)
                for (std::size_t i = 0; i < 4; ++i) {
                    const vector du[4] = {du_at(i * 4, s, r0), du_at(i * 4 + 1, s, r0), du_at(i * 4 + 2, s, r0),
                                          du_at(i * 4 + 3, s, r0)};
                    columns[i][0] = fused_multiply_add(half, du[1] + du[2], du[0]);
                    columns[i][1] = half * (du[1] - du[2]);
                    columns[i][2] = fused_multiply_add(half, du[1] + du[2], du[3]);
                }
                PETRA_UNROLL(3)
                for (std::size_t k = 0; k < 3; ++k) { // G^T (dU G)
                    fused_multiply_add(half, columns[1][k] + columns[2][k], columns[0][k]).store_aligned(taps[k]);
                    (half * (columns[1][k] - columns[2][k])).store_aligned(taps[3 + k]);
                    fused_multiply_add(half, columns[1][k] + columns[2][k], columns[3][k]).store_aligned(taps[6 + k]);
                }
            }
            const std::size_t used = std::min(width, results - r0);
            for (std::size_t lane = 0; lane < used; ++lane) {
                T* g = grad_weights + ((r0 + lane) * sources + s) * 9;
                PETRA_UNROLL(9)
                for (std::size_t t = 0; t < 9; ++t) g[t] += taps[t][lane];
            }
        }
    }
}

} // namespace petra::kernels::detail
