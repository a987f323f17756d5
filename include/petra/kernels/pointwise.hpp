// 1x1 convolutions with stride 2 and no padding (a downsampling's shortcut)
// as matrix products, image by image.
//
// Output pixel (oh, ow) of such a convolution reads input pixel (2 oh, 2 ow)
// of every input channel and nothing else. An image's forward is therefore
// one matrix product, the weights (out x in channels) times the image's even
// pixels (in channels x output pixels), and its input gradient another, the
// transposed weights times the output gradient, whose values go back to the
// even pixels with zeros between them.
//
// Each image's even pixels are gathered (on AVX-512 two masked loads and a
// permutation per row, or per two rows up to 16 wide; split_row_stride_two
// elsewhere) into rows of whole vectors that stay in the core's L1, and the
// products are taken by register tiles of gemm_blocking's shape (8 rows x 3
// vectors on AVX-512) that load the weights as broadcasts of a packed
// sliver and store their results where they belong, with beta. The sums
// run over the depth in order through fused_multiply_add, as the direct
// form's do (a 1x1 kernel's taps are the input channels): the direct form's
// values under either compiler.
//
// A 3x3 convolution with stride 2 on images whose rows fit two vectors (a
// network's downsamplings, 28x28 -> 14x14 and 14x14 -> 7x7) takes its forward
// pass the same way: the weights as they lie (out channels x in channels * 9)
// times the image's patches, row (ci, kh, kw) holding the input value under
// tap (kh, kw) of every output pixel (zero outside the image; gather_patches).
// The products run over the taps in the direct form's order, so the values are
// the direct form's; its phase planes' wide rows (8 pixels for 7 output
// columns) and one tile per image of four vectors, 49 lanes of 64 used (or at
// 14 output columns row blocks of 14 lanes of 16), gave way to tiles whose
// lanes are all output pixels. Its input gradient (rows of one vector, padding
// 1, even widths) is four such products per group of images, one per phase of
// the input (patch_backward_input), in the order of the direct form's paired
// phases.
//
// The direct correlation these replace took the even pixels of a chunk of
// images at once (a phased copy that the caches no longer held when the
// products read it: 29% of the forward at 28x28 x 16) and stored its input
// gradient row piece by row piece (41% of that kernel); see bench/RESULTS.md.
// The weight gradient stays with the direct form (convolution.hpp), which
// reads the input in place: dot products along the gathered pixels ran at
// half to 0.85 times its speed (Zen 5, kernels alone).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <type_traits>
#include <utility>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include <petra/kernels/gemm.hpp>
#include <petra/kernels/layout.hpp>
#include <petra/kernels/scratch.hpp>
#include <petra/kernels/simd.hpp>

namespace petra::kernels::detail {

// The sizes a 1x1 stride-2 convolution without padding works on: an image's
// input channels x in_height x in_width, its output out_channels x
// out_height() x out_width().
struct pointwise_geometry {
    std::size_t in_channels;
    std::size_t out_channels;
    std::size_t in_height;
    std::size_t in_width;

    constexpr std::size_t out_height() const { return (in_height + 1) / 2; }
    constexpr std::size_t out_width() const { return (in_width + 1) / 2; }
    constexpr std::size_t pixels() const { return out_height() * out_width(); }
    // A channel's row in the gathered buffers: its pixels, then zeros up to
    // a whole vector.
    template <class T>
    constexpr std::size_t row_stride() const
    {
        return (pixels() + simd_width<T> - 1) / simd_width<T> * simd_width<T>;
    }
};

struct pointwise_weights_tag {};
struct pointwise_pixels_tag {};

// Values of the packed weights (rows x depth, in slivers of gemm_blocking's
// mr rows, the last padded with zero rows, then the same weights as depth x
// rows for the forward's pointwise_columns) and of the gathered pixels
// (channels rows of row_stride, then a row of out_width zeros the input
// gradient interleaves).
template <class T>
constexpr std::size_t pointwise_weights_count(std::size_t rows, std::size_t depth)
{
    constexpr std::size_t mr = gemm_blocking<T>::mr;
    return (rows + mr - 1) / mr * mr * depth + rows * depth;
}
template <class T>
constexpr std::size_t pointwise_pixels_count(const pointwise_geometry& geometry, std::size_t channels)
{
    return channels * geometry.row_stride<T>() + geometry.out_width();
}

// What pointwise_forward (rows: the output channels, depth: the input
// channels) or pointwise_backward_input (the other way round) takes from
// scratch.
template <class T>
constexpr scratch_demand pointwise_scratch(const pointwise_geometry& geometry, std::size_t rows, std::size_t depth)
{
    scratch_demand demand;
    demand.template ask<pointwise_weights_tag, T>(pointwise_weights_count<T>(rows, depth));
    demand.template ask<pointwise_pixels_tag, T>(pointwise_pixels_count<T>(geometry, geometry.in_channels));
    return demand;
}

// The sizes a 3x3 stride-2 convolution with `padding` works on (an image's
// input channels x in_height x in_width, its output out_channels x
// out_height() x out_width()) and its patches: depth() rows, (ci, kh, kw) in
// the weights' order, of pixels() values.
struct patch_geometry {
    std::size_t in_channels;
    std::size_t out_channels;
    std::size_t in_height;
    std::size_t in_width;
    std::size_t padding;

    constexpr std::size_t out_height() const { return (in_height + 2 * padding - 3) / 2 + 1; }
    constexpr std::size_t out_width() const { return (in_width + 2 * padding - 3) / 2 + 1; }
    constexpr std::size_t pixels() const { return out_height() * out_width(); }
    constexpr std::size_t depth() const { return 9 * in_channels; }
};

// Whether patch_forward takes a shape: float on AVX-512 (gather_patches'
// one or two masked loads and three permutations per input row), input rows
// of at most two vectors and output rows of at most one. Elsewhere the
// direct form computes the same values.
template <class T>
constexpr bool takes_patch_products(const patch_geometry& geometry)
{
#if defined(__AVX512F__)
    return std::is_same_v<T, float> && geometry.in_width <= 32 && geometry.out_width() <= 16;
#else
    (void)geometry;
    return false;
#endif
}

// Whether patch_backward_input takes a shape: as takes_patch_products, with
// padding 1 and an even width, where each row of the input gradient is its
// two column phases interleaved (the direct form's pairs_phase_columns),
// rows of at most 16 values and at most 16 rows (an image's phase then
// holds at most 4 vectors).
template <class T>
constexpr bool takes_patch_input_gradient(const patch_geometry& geometry)
{
    return takes_patch_products<T>(geometry) && geometry.padding == 1 && geometry.in_width % 2 == 0 &&
           geometry.in_width <= 16 && geometry.in_height <= 16;
}

// The weights that the input gradient's phase (a, b) of a convolution
// (kernel x kernel, stride `stride`) multiplies: an in_channels x taps
// matrix, taps = out_channels x taps_u x taps_v in (co, u, v) order, tap
// (co, u, v) of input channel ci the kernel's value at row a + stride u and
// column b + stride v: matrix[ci * taps + (co * taps_u + u) * taps_v + v] =
// weights[co][ci][a + stride u][b + stride v]. Returns taps.
template <class T>
std::size_t gather_phase_weights(const T* weights, std::size_t out_channels, std::size_t in_channels,
                                 std::size_t kernel, std::size_t stride, std::size_t a, std::size_t b,
                                 std::size_t taps_u, std::size_t taps_v, T* matrix)
{
    const std::size_t taps = out_channels * taps_u * taps_v;
    for (std::size_t co = 0; co < out_channels; ++co) {
        for (std::size_t u = 0; u < taps_u; ++u) {
            for (std::size_t v = 0; v < taps_v; ++v) {
                const std::size_t t = (co * taps_u + u) * taps_v + v;
                for (std::size_t ci = 0; ci < in_channels; ++ci) {
                    matrix[ci * taps + t] =
                        weights[((co * in_channels + ci) * kernel + a + stride * u) * kernel + b + stride * v];
                }
            }
        }
    }
    return taps;
}

struct patch_matrix_tag {};
struct patch_results_tag {};

// The input gradient's four phase products (patch_backward_input): row
// phase a (input rows 2 r + a - 1) and column phase b (columns 2 c + b - 1;
// b = 1 the even columns, b = 0 the odd ones, read one output column
// further) take taps kh = a + 2 u and kw = b + 2 v, (3 - a + 1) / 2 and (3
// - b + 1) / 2 of them; rows r from first_row(a) to end_row(a).
struct patch_phases {
    static constexpr std::size_t taps(std::size_t a) { return (4 - a) / 2; }
    static constexpr std::size_t first_row(std::size_t a) { return a == 0 ? 1 : 0; }
    static constexpr std::size_t end_row(std::size_t a, std::size_t height) { return (height + 2 - a) / 2; }
    // The depth of phase (a, b)'s product: every output channel's taps.
    static constexpr std::size_t depth(const patch_geometry& geometry, std::size_t a, std::size_t b)
    {
        return geometry.out_channels * taps(a) * taps(b);
    }
    // Values of patch_backward_input's scratch for `group` images at a
    // time: the weight matrix of the deepest phase and the four phases'
    // packed weights; the group's patches of the deepest phase; two phases'
    // results for the group.
    struct scratch_counts {
        std::size_t weights, patches, results;
    };
    template <class T>
    static constexpr scratch_counts counts(const patch_geometry& geometry, std::size_t group)
    {
        const std::size_t columns = group * end_row(1, geometry.in_height) * (geometry.in_width / 2);
        // (The patches' last whole-vector store runs up to 15 values past.)
        scratch_counts counts{geometry.in_channels * depth(geometry, 0, 0), depth(geometry, 0, 0) * columns + 15,
                              2 * geometry.in_channels * columns};
        for (std::size_t a = 0; a < 2; ++a) {
            for (std::size_t b = 0; b < 2; ++b) {
                counts.weights += pointwise_weights_count<T>(geometry.in_channels, depth(geometry, a, b));
            }
        }
        return counts;
    }
    // The bytes of one image's patches and results: what a group holds of
    // each image.
    template <class T>
    static constexpr std::size_t image_bytes(const patch_geometry& geometry)
    {
        const scratch_counts one = counts<T>(geometry, 1);
        return (one.patches + one.results) * sizeof(T);
    }
};

// What patch_forward takes from scratch: the packed weights and one
// image's patches.
template <class T>
constexpr scratch_demand patch_forward_scratch(const patch_geometry& geometry)
{
    scratch_demand demand;
    demand.template ask<pointwise_weights_tag, T>(pointwise_weights_count<T>(geometry.out_channels, geometry.depth()));
    demand.template ask<patch_matrix_tag, T>(geometry.depth() * geometry.pixels());
    return demand;
}

// What patch_backward_input takes from scratch for `group` images at a
// time: the four phases' weight matrices as they are gathered and their
// packed weights, the group's patches and their two column phases'
// results (patch_phases::counts).
template <class T>
constexpr scratch_demand patch_input_gradient_scratch(const patch_geometry& geometry, std::size_t group)
{
    scratch_demand demand;
    const auto counts = patch_phases::counts<T>(geometry, group);
    demand.template ask<pointwise_weights_tag, T>(counts.weights);
    demand.template ask<patch_matrix_tag, T>(counts.patches);
    demand.template ask<patch_results_tag, T>(counts.results);
    return demand;
}

// accumulator[i][v] = sum over d < depth, in order, of broadcasts[d *
// broadcast_stride + i] * rows[d * row_stride + v * width + lane], for
// Broadcasts values i broadcast against Vectors vectors v of a row (the
// last through load_first(last) unless Whole): the loop of pointwise_tile
// (rows of results along the broadcasts) and of column_block (columns).
template <class T, std::size_t Broadcasts, std::size_t Vectors, bool Whole>
inline void broadcast_products(std::size_t depth, const T* __restrict broadcasts, std::size_t broadcast_stride,
                               const T* rows, std::size_t row_stride, std::size_t last,
                               simd<T> (&accumulator)[Broadcasts][Vectors])
{
    using vector = simd<T>;
    constexpr std::size_t width = vector::size;
    PETRA_UNROLL(16)
    for (std::size_t i = 0; i < Broadcasts; ++i) {
        PETRA_UNROLL(4)
        for (std::size_t v = 0; v < Vectors; ++v) accumulator[i][v] = vector(T(0));
    }
    for (std::size_t d = 0; d < depth; ++d) {
        const T* row = rows + d * row_stride;
        vector values[Vectors];
        PETRA_UNROLL(4)
        for (std::size_t v = 0; v < Vectors; ++v) {
            values[v] =
                Whole || v + 1 < Vectors ? vector::load_unaligned(row + v * width) : load_first(row + v * width, last);
        }
        PETRA_UNROLL(16)
        for (std::size_t i = 0; i < Broadcasts; ++i) {
            const vector weight(broadcasts[i]);
            PETRA_UNROLL(4)
            for (std::size_t v = 0; v < Vectors; ++v)
                accumulator[i][v] = fused_multiply_add(weight, values[v], accumulator[i][v]);
        }
        broadcasts += broadcast_stride;
    }
}

// The rows x columns results of one register tile: result (i, j) = sum
// over d < depth, in order, of sliver[d * Rows + i] * b[d * b_stride + j],
// stored at out + i * out_stride + j with beta (store_vector), for i < rows
// and j < columns <= Vectors * width. Where Whole, every load of b is a
// whole vector (b's rows are padded, or the tile's columns fill it);
// otherwise the last vector reads only the values of its columns.
template <class T, std::size_t Rows, std::size_t Vectors, bool Whole>
[[gnu::noinline]] void pointwise_tile(std::size_t depth, const T* __restrict sliver, const T* b, std::size_t b_stride,
                                      std::size_t columns, T* out, std::size_t out_stride, std::size_t rows, T beta)
{
    using vector = simd<T>;
    constexpr std::size_t width = vector::size;
    const std::size_t last = columns - (Vectors - 1) * width;
    vector accumulator[Rows][Vectors];
    broadcast_products<T, Rows, Vectors, Whole>(depth, sliver, Rows, b, b_stride, last, accumulator);
    // Unrolled over the tile's Rows, each stored if it is one of the rows:
    // a loop to the run-time count indexes the accumulators, which then go
    // to the stack and back (zeroed there first, too).
    PETRA_UNROLL(16)
    for (std::size_t i = 0; i < Rows; ++i) {
        if (i >= rows) break;
        PETRA_UNROLL(4)
        for (std::size_t v = 0; v < Vectors; ++v) {
            store_vector(accumulator[i][v], v + 1 < Vectors ? width : last, out + i * out_stride + v * width, beta);
        }
    }
}

// The results of b's first Columns columns and count <= Vectors * width
// rows, the rows along the vectors: result (i, j) = sum over d < depth, in
// order, of a[d * a_stride + i] * b[d * b_stride + j], stored value by
// value (pointwise_columns).
template <class T, std::size_t Columns, std::size_t Vectors>
void column_block(std::size_t count, std::size_t depth, const T* a, std::size_t a_stride, const T* b,
                  std::size_t b_stride, T* out, std::size_t out_stride, T beta)
{
    using vector = simd<T>;
    constexpr std::size_t width = vector::size;
    vector accumulator[Columns][Vectors];
    broadcast_products<T, Columns, Vectors, false>(depth, b, b_stride, a, a_stride, count - (Vectors - 1) * width,
                                                   accumulator);
    alignas(buffer_alignment) T lanes[Vectors * width];
    for (std::size_t c = 0; c < Columns; ++c) {
        PETRA_UNROLL(4)
        for (std::size_t v = 0; v < Vectors; ++v) accumulator[c][v].store_aligned(lanes + v * width);
        for (std::size_t i = 0; i < count; ++i) {
            T& target = out[i * out_stride + c];
            target = beta == T(0) ? lanes[i] : std::fma(beta, target, lanes[i]);
        }
    }
}

// The same results as pointwise_tile's for the columns past a product's
// last whole vector, with the rows along the vectors: result (i, j) = sum
// over d < depth, in order, of a[d * a_stride + i] * b[d * b_stride + j]
// (a: the operand transposed, depth x rows), for i < rows and j < columns,
// stored value by value. A tile would compute a whole vector of columns for
// them (at 14x14, 196 pixels: a thirteenth vector of which 4 lanes are
// stored, three quarters of its products wasted; at 7x7, 49 pixels, a fourth
// vector of which one lane is). A block of columns times up to four
// vectors of rows at a time, as many columns as make up to 16 chains of
// sums (8 with 16 registers): one column at a time, with one or two vectors
// of rows, the sums waited on the FMA's latency.
template <class T>
[[gnu::noinline]] void pointwise_columns(std::size_t rows, std::size_t depth, const T* a, std::size_t a_stride,
                                         const T* b, std::size_t b_stride, std::size_t columns, T* out,
                                         std::size_t out_stride, T beta)
{
    constexpr std::size_t width = simd_width<T>, vectors = 4, max_columns = 8;
    constexpr std::size_t chains = gemm_blocking<T>::wide_register_file ? 16 : 8;
    for (std::size_t i0 = 0; i0 < rows; i0 += vectors * width) {
        const std::size_t count = std::min(vectors * width, rows - i0);
        const std::size_t count_vectors = (count + width - 1) / width;
        const std::size_t block = std::min(max_columns, chains / count_vectors);
        for (std::size_t j = 0; j < columns; j += block) {
            const std::size_t block_columns = std::min(block, columns - j);
            const T* a_rows = a + i0;
            T* out_rows = out + i0 * out_stride + j;
            // Shape k: k / vectors + 1 columns, k % vectors + 1 vectors.
            const std::size_t shape = (block_columns - 1) * vectors + count_vectors - 1;
            [&]<std::size_t... K>(std::index_sequence<K...>)
            {
                (
                    [&] {
                        constexpr std::size_t shape_columns = K / vectors + 1, shape_vectors = K % vectors + 1;
                        if constexpr (shape_columns * shape_vectors <= chains) {
                            if (shape == K) {
                                column_block<T, shape_columns, shape_vectors>(count, depth, a_rows, a_stride, b + j,
                                                                              b_stride, out_rows, out_stride, beta);
                            }
                        }
                    }(),
                    ...);
            }
            (std::make_index_sequence<max_columns * vectors>{});
        }
    }
}

// out (rows x columns, rows out_stride apart) = the operand packed by
// pack_slivers<mr> (rows x depth) times b (depth x columns, rows b_stride
// apart) + beta * out (not read where beta == 0). b_padded: b's rows hold
// whole vectors (zeros past columns), which the last tile then loads whole.
// transposed: the same operand as depth x rows, rows transposed_stride
// apart, for the columns past the last whole vector (pointwise_columns).
template <class T>
void pointwise_product(std::size_t rows, std::size_t depth, const T* packed, const T* transposed,
                       std::size_t transposed_stride, const T* b, std::size_t b_stride, std::size_t columns,
                       bool b_padded, T* out, std::size_t out_stride, T beta)
{
    constexpr std::size_t mr = gemm_blocking<T>::mr, vectors = gemm_blocking<T>::vectors_per_row;
    constexpr std::size_t width = simd_width<T>, tile = vectors * width;
    const std::size_t whole_end = columns - columns % tile, rest = columns - whole_end;
    // The vectors of the last tile. A last vector that is not whole goes to
    // pointwise_columns, which multiplies only its columns but stores its
    // results value by value, where that saves more than it costs: where it
    // holds fewer than a quarter of a vector's columns, or over a depth of
    // at least four vectors' lanes. (In a Zen 5 training step the 3x3
    // stride-2 forward at 28x28, 196 pixels, depth 144, ran 1.12 times
    // faster so, the 1x1 one, depth 16, 0.94 times: bench/RESULTS.md.)
    const std::size_t partial = rest % width;
    const bool partial_to_columns = partial < width / 4 || depth >= 4 * width;
    const std::size_t rest_vectors = rest / width + (partial != 0 && !partial_to_columns ? 1 : 0);
    const std::size_t tiled_end = std::min(columns, whole_end + rest_vectors * width);
    for (std::size_t r0 = 0; r0 < rows; r0 += mr) {
        const T* sliver = packed + r0 * depth;
        const std::size_t count = std::min(mr, rows - r0);
        T* out_rows = out + r0 * out_stride;
        for (std::size_t j = 0; j < whole_end; j += tile) {
            pointwise_tile<T, mr, vectors, true>(depth, sliver, b + j, b_stride, tile, out_rows + j, out_stride, count,
                                                 beta);
        }
        if (rest_vectors == 0) continue;
        const std::size_t last = tiled_end - whole_end;
        [&]<std::size_t... Index>(std::index_sequence<Index...>)
        {
            ((rest_vectors == Index + 1
                  ? (b_padded ? pointwise_tile<T, mr, Index + 1, true>(depth, sliver, b + whole_end, b_stride, last,
                                                                       out_rows + whole_end, out_stride, count, beta)
                              : pointwise_tile<T, mr, Index + 1, false>(depth, sliver, b + whole_end, b_stride, last,
                                                                        out_rows + whole_end, out_stride, count, beta))
                  : void()),
             ...);
        }
        (std::make_index_sequence<vectors>{});
    }
    if (tiled_end < columns) {
        pointwise_columns(rows, depth, transposed, transposed_stride, b + tiled_end, b_stride, columns - tiled_end,
                          out + tiled_end, out_stride, beta);
    }
}

#if defined(__AVX512F__)
// The even pixels of a float plane's even rows, up to 32 values wide, a
// vector at a time: two masked loads and one permutation of their lanes per
// store. Rows of at most 16 values give two output rows to a store (rows 2 oh
// and 2 oh + 2, one from each load), wider ones one. Masks and permutation
// are built once per shape: split_row_stride_two, which builds them per row,
// took 29% of the forward at 28x28 x 16 in that form (Zen 5).
struct even_pixel_rows {
    __m512i index;
    __mmask16 first_load, second_load;
    std::size_t second_offset; // of the second load, in values from the first
    std::size_t rows;          // output rows per store: 1 or 2
    std::size_t out_width;

    static constexpr bool fits(std::size_t width) { return width <= 32; }

    explicit even_pixel_rows(std::size_t width) : rows(width <= 16 ? 2 : 1), out_width((width + 1) / 2)
    {
        alignas(64) int lanes[16] = {};
        for (std::size_t c = 0; c < out_width; ++c) {
            lanes[c] = static_cast<int>(2 * c);
            if (rows == 2) lanes[out_width + c] = static_cast<int>(16 + 2 * c);
        }
        index = _mm512_load_si512(lanes);
        first_load = first_lanes(std::min<std::size_t>(width, 16));
        second_load = first_lanes(rows == 2 ? width : width - 16);
        second_offset = rows == 2 ? 2 * width : 16;
    }

    // Output rows [0, out_height) of the plane (rows `width` apart) into
    // out, out_width values each, one after another.
    void operator()(const float* plane, std::size_t width, std::size_t out_height, float* out) const
    {
        for (std::size_t oh = 0; oh < out_height; oh += rows) {
            const float* row = plane + 2 * oh * width;
            // The last output row alone where the rows go in pairs: its
            // second load would read past the plane.
            const bool whole = rows == 1 || oh + 1 < out_height;
            const __m512 first = _mm512_maskz_loadu_ps(first_load, row);
            const __m512 second = _mm512_maskz_loadu_ps(whole ? second_load : __mmask16(0), row + second_offset);
            _mm512_mask_storeu_ps(out + oh * out_width, first_lanes((whole ? rows : 1) * out_width),
                                  _mm512_permutex2var_ps(first, index, second));
        }
    }
};
#endif

// The even pixels of one image's channels (input rows 2 oh, columns 2 ow)
// into rows of geometry.row_stride<T>() values, zeros past the pixels.
template <class T>
void gather_even_pixels(const pointwise_geometry& geometry, std::size_t channels, const T* image, T* gathered)
{
    const std::size_t height = geometry.in_height, width = geometry.in_width;
    const std::size_t out_height = geometry.out_height(), out_width = geometry.out_width();
    const std::size_t pixels = geometry.pixels(), stride = geometry.row_stride<T>();
#if defined(__AVX512F__)
    if constexpr (std::is_same_v<T, float>) {
        if (even_pixel_rows::fits(width)) {
            const even_pixel_rows gather(width);
            for (std::size_t c = 0; c < channels; ++c) {
                T* row = gathered + c * stride;
                gather(image + c * height * width, width, out_height, row);
                std::fill(row + pixels, row + stride, T(0));
            }
            return;
        }
    }
#endif
    for (std::size_t c = 0; c < channels; ++c) {
        const T* plane = image + c * height * width;
        T* row = gathered + c * stride;
        for (std::size_t oh = 0; oh < out_height; ++oh) {
            split_row_stride_two(width, plane + 2 * oh * width, row + oh * out_width, static_cast<T*>(nullptr));
        }
        std::fill(row + pixels, row + stride, T(0));
    }
}

#if defined(__AVX512F__)
// The inverse of even_pixel_rows for the input gradient: a float plane's
// rows, up to 32 values wide, written whole from its even pixels' values,
// zeros between them and in the odd rows. Rows 2 oh and 2 oh + 1 lie one
// after the other; their 2 width values go out as up to four vectors, each
// a permutation of the row's (at most 16) values with the lanes that hold
// zeros masked off, and with beta (store_lanes). Per shape, the
// permutations and masks are built once, and a pair of rows is one
// straight run of Vectors stores (spread_rows<Vectors>, the pair's
// permutations and masks in registers). Written as a loop over the pair's
// vectors with each store's mask computed in it, this function was called
// out of line by clang++ 14's builds, its loop left rolled, and their 1x1
// stride-2 input gradients ran 1.26 to 1.35 times as long as g++'s; now
// as long (Zen 5, bench/RESULTS.md).
struct even_pixel_spread {
    __m512i index[4];
    __mmask16 taken[4];       // the lanes that take a value
    __mmask16 pair_last;      // the lanes of a pair of rows' last vector
    std::size_t pair_vectors; // vectors per pair of rows: 2 width / 16, rounded up
    std::size_t out_width;
    std::size_t width;

    static constexpr bool fits(std::size_t width) { return width <= 32; }

    explicit even_pixel_spread(std::size_t width)
        : pair_last(first_lanes(2 * width - (2 * width - 1) / 16 * 16)), pair_vectors((2 * width + 15) / 16),
          out_width((width + 1) / 2), width(width)
    {
        for (std::size_t k = 0; k < 4; ++k) {
            alignas(64) int lanes[16] = {};
            unsigned mask = 0;
            for (std::size_t lane = 0; lane < 16; ++lane) {
                const std::size_t position = 16 * k + lane;
                if (position >= width || position % 2 == 1) continue;
                lanes[lane] = static_cast<int>(position / 2);
                mask |= 1u << lane;
            }
            index[k] = _mm512_load_si512(lanes);
            taken[k] = static_cast<__mmask16>(mask);
        }
    }

    // The plane's `height` rows from out_height rows of out_width values.
    PETRA_ALWAYS_INLINE void operator()(const float* values, std::size_t height, float* plane, float beta) const
    {
        switch (pair_vectors) {
        case 1: spread_rows<1>(values, height, plane, beta); break;
        case 2: spread_rows<2>(values, height, plane, beta); break;
        case 3: spread_rows<3>(values, height, plane, beta); break;
        default: spread_rows<4>(values, height, plane, beta); break;
        }
    }

private:
    template <std::size_t Vectors>
    PETRA_ALWAYS_INLINE void spread_rows(const float* values, std::size_t height, float* plane, float beta) const
    {
        const __mmask16 row_lanes = first_lanes(out_width);
        __m512i pair_index[Vectors];
        __mmask16 pair_taken[Vectors], pair_stored[Vectors];
        PETRA_UNROLL(4)
        for (std::size_t k = 0; k < Vectors; ++k) {
            pair_index[k] = index[k];
            pair_taken[k] = taken[k];
            pair_stored[k] = k + 1 < Vectors ? __mmask16(0xFFFF) : pair_last;
        }
        std::size_t y = 0;
        for (; y + 2 <= height; y += 2) {
            const __m512 row = _mm512_maskz_loadu_ps(row_lanes, values + (y / 2) * out_width);
            float* out = plane + y * width;
            PETRA_UNROLL(4)
            for (std::size_t k = 0; k < Vectors; ++k) {
                store_lanes(out + 16 * k, pair_stored[k],
                            _mm512_maskz_permutexvar_ps(pair_taken[k], pair_index[k], row), beta);
            }
        }
        if (y < height) {
            // An odd height's last row, alone.
            const __m512 row = _mm512_maskz_loadu_ps(row_lanes, values + (y / 2) * out_width);
            float* out = plane + y * width;
            for (std::size_t k = 0; 16 * k < width; ++k) {
                store_lanes(out + 16 * k, first_lanes(width - 16 * k),
                            _mm512_maskz_permutexvar_ps(taken[k], index[k], row), beta);
            }
        }
    }
};
#endif

// One image's input gradient from its even pixels' values (rows of
// geometry.row_stride<T>(), as gather_even_pixels lays them out): image =
// those values at the even pixels and zeros elsewhere, + beta * image (not
// read where beta == 0). zeros: out_width zeros.
template <class T>
void scatter_even_pixels(const pointwise_geometry& geometry, std::size_t channels, const T* gathered, const T* zeros,
                         T* image, T beta)
{
    const std::size_t height = geometry.in_height, width = geometry.in_width;
    const std::size_t out_width = geometry.out_width(), stride = geometry.row_stride<T>();
#if defined(__AVX512F__)
    if constexpr (std::is_same_v<T, float>) {
        if (even_pixel_spread::fits(width)) {
            const even_pixel_spread spread(width);
            for (std::size_t c = 0; c < channels; ++c)
                spread(gathered + c * stride, height, image + c * height * width, beta);
            return;
        }
    }
#endif
    // Pairs (even, odd column) of a row; an odd width ends on an even column.
    const std::size_t pairs = width / 2;
    for (std::size_t c = 0; c < channels; ++c) {
        const T* values = gathered + c * stride;
        T* plane = image + c * height * width;
        for (std::size_t y = 0; y < height; ++y) {
            T* out = plane + y * width;
            if (y % 2 == 1) {
                if (beta == T(0)) {
                    std::fill(out, out + width, T(0));
                } else {
                    for (std::size_t x = 0; x < width; ++x) out[x] *= beta;
                }
                continue;
            }
            const T* row = values + (y / 2) * out_width;
            store_row_interleaved(pairs, row, zeros, out, beta);
            if (width % 2 == 1) {
                T& target = out[width - 1];
                target = beta == T(0) ? row[out_width - 1] : std::fma(beta, target, row[out_width - 1]);
            }
        }
    }
}

// A forward's weights (rows x depth, as they lie) as pointwise_product
// takes them: packed in slivers (the operand), then transposed (depth x
// rows, for pointwise_columns), in the scratch's pointwise_weights buffer.
// Returns the transposed copy; the packed one is at the buffer's start.
template <class T>
const T* pack_forward_weights(const T* weights, std::size_t rows, std::size_t depth, T* packed)
{
    constexpr std::size_t mr = gemm_blocking<T>::mr;
    pack_slivers<mr>(weights, depth, 1, rows, depth, packed);
    T* transposed = packed + (rows + mr - 1) / mr * mr * depth;
    for (std::size_t d = 0; d < depth; ++d)
        for (std::size_t r = 0; r < rows; ++r) transposed[d * rows + r] = weights[r * depth + d];
    return transposed;
}

// y = the convolution of x (batch images) + beta * y (not read where beta ==
// 0), image by image: its even pixels gathered, then the product.
template <class T>
void pointwise_forward(const pointwise_geometry& geometry, std::size_t batch, const T* x, const T* weights, T* y,
                       T beta, scratch_source& scratch)
{
    const std::size_t in_channels = geometry.in_channels, out_channels = geometry.out_channels;
    const std::size_t pixels = geometry.pixels(), in_values = in_channels * geometry.in_height * geometry.in_width;
    T* packed = scratch.take<pointwise_weights_tag, T>(pointwise_weights_count<T>(out_channels, in_channels));
    const T* transposed = pack_forward_weights(weights, out_channels, in_channels, packed);
    T* gathered = scratch.take<pointwise_pixels_tag, T>(pointwise_pixels_count<T>(geometry, in_channels));
    for (std::size_t n = 0; n < batch; ++n) {
        gather_even_pixels(geometry, in_channels, x + n * in_values, gathered);
        // The next image toward L2 while this one's product runs (layout.hpp).
        if (n + 1 < batch) prefetch_stream(images_bytes(x, in_values, n + 1, 1), 1).advance();
        pointwise_product(out_channels, in_channels, packed, transposed, out_channels, gathered,
                          geometry.row_stride<T>(), pixels, true, y + n * out_channels * pixels, pixels, beta);
    }
}

#if defined(__AVX512F__)
// One image's patches (patch_geometry): patch row (ci, kh, kw), output pixel
// (oh, ow) = image[ci][2 oh + kh - padding][2 ow + kw - padding], zero
// outside the image. Each input row (at most 32 values: one or two masked
// loads) is loaded once per tap row kh that reads it, and each of its three
// column phases is one permutation of it (of the pair), zero lanes where
// the column falls outside, stored as one masked run of out_width values
// (the permutations and masks built once per call).
inline void gather_patches(const patch_geometry& geometry, const float* image, float* patches)
{
    const std::size_t height = geometry.in_height, width = geometry.in_width, padding = geometry.padding;
    const std::size_t out_height = geometry.out_height(), out_width = geometry.out_width(), pixels = geometry.pixels();
    __m512i columns[3];
    __mmask16 inside[3];
    for (std::size_t kw = 0; kw < 3; ++kw) {
        alignas(64) int lanes[16] = {};
        unsigned mask = 0;
        for (std::size_t ow = 0; ow < out_width; ++ow) {
            const std::size_t column = 2 * ow + kw; // + padding
            if (column < padding || column - padding >= width) continue;
            lanes[ow] = static_cast<int>(column - padding);
            mask |= 1u << ow;
        }
        columns[kw] = _mm512_load_si512(lanes);
        inside[kw] = static_cast<__mmask16>(mask);
    }
    const __mmask16 out_lanes = first_lanes(out_width);
    // Rows of one vector, or of two (the first whole).
    const auto gather = [&]<bool Wide>() PETRA_ALWAYS_INLINE_LAMBDA {
        const __mmask16 first_part = first_lanes(std::min<std::size_t>(width, 16));
        const __mmask16 second_part = first_lanes(width - std::min<std::size_t>(width, 16));
        for (std::size_t ci = 0; ci < geometry.in_channels; ++ci) {
            const float* plane = image + ci * height * width;
            for (std::size_t kh = 0; kh < 3; ++kh) {
                float* rows = patches + (ci * 9 + kh * 3) * pixels;
                for (std::size_t oh = 0; oh < out_height; ++oh) {
                    const std::size_t row = 2 * oh + kh; // + padding
                    const bool outside = row < padding || row - padding >= height;
                    const float* values = plane + (outside ? 0 : (row - padding) * width);
                    const __m512 low = outside ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(first_part, values);
                    const __m512 high =
                        !Wide || outside ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(second_part, values + 16);
                    PETRA_UNROLL(3)
                    for (std::size_t kw = 0; kw < 3; ++kw) {
                        const __m512 phase = Wide ? _mm512_maskz_permutex2var_ps(inside[kw], low, columns[kw], high)
                                                  : _mm512_maskz_permutexvar_ps(inside[kw], columns[kw], low);
                        _mm512_mask_storeu_ps(rows + kw * pixels + oh * out_width, out_lanes, phase);
                    }
                }
            }
        }
    };
    if (width > 16) {
        gather.template operator()<true>();
    } else {
        gather.template operator()<false>();
    }
}

// y = the 3x3 stride-2 convolution of x (batch images) + beta * y (not read
// where beta == 0), image by image: its patches gathered, then the product
// of the weights and the patches, stored into y (takes_patch_products).
inline void patch_forward(const patch_geometry& geometry, std::size_t batch, const float* x, const float* weights,
                          float* y, float beta, scratch_source& scratch)
{
    const std::size_t out_channels = geometry.out_channels, depth = geometry.depth(), pixels = geometry.pixels();
    const std::size_t in_values = geometry.in_channels * geometry.in_height * geometry.in_width;
    float* packed = scratch.take<pointwise_weights_tag, float>(pointwise_weights_count<float>(out_channels, depth));
    const float* transposed = pack_forward_weights(weights, out_channels, depth, packed);
    float* patches = scratch.take<patch_matrix_tag, float>(depth * pixels);
    for (std::size_t n = 0; n < batch; ++n) {
        gather_patches(geometry, x + n * in_values, patches);
        // The next image toward L2 while this one's product runs (layout.hpp).
        if (n + 1 < batch) prefetch_stream(images_bytes(x, in_values, n + 1, 1), 1).advance();
        pointwise_product(out_channels, depth, packed, transposed, out_channels, patches, pixels, pixels, false,
                          y + n * out_channels * pixels, pixels, beta);
    }
}

// grad_x = the input gradient of a 3x3 stride-2 convolution with padding 1
// (takes_patch_input_gradient) applied to grad_y + beta * grad_x (not read
// where beta == 0), `group` images at a time and row phase by row phase:
// for each column phase the transposed, flipped weights of its taps
// (patch_phases) times the output gradient's values under them (an
// image's patch row per tap: a run of the output plane read through
// masks), then the two phases' rows interleaved into the input gradient's
// rows. The
// taps and the output channels in the direct form's order (its paired
// phase columns): the same values. (One image at a time, a phase's 49
// columns at 7x7 left one column to pointwise_columns, whose chains over
// up to 256 taps made the whole 0.96 times the direct form's speed.)
inline void patch_backward_input(const patch_geometry& geometry, std::size_t batch, std::size_t group,
                                 const float* grad_y, const float* weights, float* grad_x, float beta,
                                 scratch_source& scratch)
{
    using phases = patch_phases;
    const std::size_t in_channels = geometry.in_channels, out_channels = geometry.out_channels;
    const std::size_t height = geometry.in_height, width = geometry.in_width, half_width = width / 2;
    const std::size_t out_height = geometry.out_height(), out_width = geometry.out_width();
    const std::size_t in_values = in_channels * height * width;
    const auto counts = phases::counts<float>(geometry, group);
    float* matrix = scratch.take<pointwise_weights_tag, float>(counts.weights);
    // Phase (a, b)'s weights, packed, then transposed (pack_forward_weights),
    // each after the one before; the matrix they are packed from first.
    const float* packed[2][2];
    const float* transposed[2][2];
    float* next = matrix + in_channels * phases::depth(geometry, 0, 0);
    for (std::size_t a = 0; a < 2; ++a) {
        for (std::size_t b = 0; b < 2; ++b) {
            const std::size_t depth = gather_phase_weights(weights, out_channels, in_channels, 3, 2, a, b,
                                                           phases::taps(a), phases::taps(b), matrix);
            packed[a][b] = next;
            transposed[a][b] = pack_forward_weights<float>(matrix, in_channels, depth, next);
            next += pointwise_weights_count<float>(in_channels, depth);
        }
    }
    float* patches = scratch.take<patch_matrix_tag, float>(counts.patches);
    float* results = scratch.take<patch_results_tag, float>(counts.results);
    for (std::size_t n0 = 0; n0 < batch; n0 += group) {
        const std::size_t images = std::min(group, batch - n0);
        for (std::size_t a = 0; a < 2; ++a) {
            const std::size_t first = phases::first_row(a), rows = phases::end_row(a, height) - first;
            if (rows == 0) continue;
            // An image's columns (its rows of this phase), then the group's.
            const std::size_t image_columns = rows * half_width, columns = images * image_columns;
            float* phase_results[2] = {results + in_channels * columns, results}; // b = 0 (odd), b = 1 (even)
            for (std::size_t b = 0; b < 2; ++b) {
                const std::size_t taps_u = phases::taps(a), taps_v = phases::taps(b);
                // Result pixel (r, c) of phase (a, b) reads output pixel (r -
                // u, c + 1 - b - v) (b + v <= 1: column phase 1 has one tap).
                // The output's rows are half_width wide, as the phase's are:
                // an image's patch row for tap (u, v) is the output plane's
                // run from row first - u, column 1 - b - v on, read with the
                // lanes past a row's end or outside the plane masked, a
                // vector at a time (at most 4: takes_patch_input_gradient).
                // The rows are written in memory order, so a whole last
                // vector runs into values written after it (patch_phases'
                // counts leave room past the last).
                const std::size_t vectors = (image_columns + 15) / 16;
                __mmask16 masks[2][2][4];
                std::ptrdiff_t starts[2][2];
                for (std::size_t u = 0; u < taps_u; ++u) {
                    for (std::size_t v = 0; v < taps_v; ++v) {
                        const std::size_t shift = 1 - b - v;
                        for (std::size_t q = 0; q < vectors; ++q) {
                            unsigned mask = 0;
                            for (std::size_t lane = 0; lane < 16; ++lane) {
                                const std::size_t j = 16 * q + lane, k = j / half_width, c = j % half_width;
                                const std::size_t output_row = first + k; // - u
                                if (j < image_columns && c + shift < out_width && output_row >= u &&
                                    output_row - u < out_height) {
                                    mask |= 1u << lane;
                                }
                            }
                            masks[u][v][q] = static_cast<__mmask16>(mask);
                        }
                        // The run starts at output row first - u, which may be -1.
                        starts[u][v] = (static_cast<std::ptrdiff_t>(first) - static_cast<std::ptrdiff_t>(u)) *
                                           static_cast<std::ptrdiff_t>(out_width) +
                                       static_cast<std::ptrdiff_t>(shift);
                    }
                }
                float* row = patches;
                for (std::size_t co = 0; co < out_channels; ++co) {
                    for (std::size_t u = 0; u < taps_u; ++u) {
                        for (std::size_t v = 0; v < taps_v; ++v) {
                            for (std::size_t i = 0; i < images; ++i, row += image_columns) {
                                const float* run =
                                    grad_y + ((n0 + i) * out_channels + co) * out_height * out_width + starts[u][v];
                                for (std::size_t q = 0; q < vectors; ++q) {
                                    _mm512_storeu_ps(row + 16 * q, _mm512_maskz_loadu_ps(masks[u][v][q], run + 16 * q));
                                }
                            }
                        }
                    }
                }
                pointwise_product(in_channels, phases::depth(geometry, a, b), packed[a][b], transposed[a][b],
                                  in_channels, patches, columns, columns, false, phase_results[b], columns, 0.0f);
            }
            for (std::size_t i = 0; i < images; ++i) {
                for (std::size_t ci = 0; ci < in_channels; ++ci) {
                    for (std::size_t k = 0; k < rows; ++k) {
                        const std::size_t y = 2 * (first + k) + a - 1, at = ci * columns + i * image_columns;
                        store_row_interleaved(half_width, phase_results[1] + at + k * half_width,
                                              phase_results[0] + at + k * half_width,
                                              grad_x + (n0 + i) * in_values + (ci * height + y) * width, beta);
                    }
                }
            }
        }
    }
}
#endif

// grad_x = the input gradient of the convolution applied to grad_y + beta *
// grad_x (not read where beta == 0), image by image: the product of the
// transposed weights and grad_y (read where it lies), then spread over the
// even pixels.
template <class T>
void pointwise_backward_input(const pointwise_geometry& geometry, std::size_t batch, const T* grad_y, const T* weights,
                              T* grad_x, T beta, scratch_source& scratch)
{
    const std::size_t in_channels = geometry.in_channels, out_channels = geometry.out_channels;
    const std::size_t pixels = geometry.pixels(), in_values = in_channels * geometry.in_height * geometry.in_width;
    const std::size_t stride = geometry.row_stride<T>();
    constexpr std::size_t mr = gemm_blocking<T>::mr;
    T* packed = scratch.take<pointwise_weights_tag, T>(pointwise_weights_count<T>(in_channels, out_channels));
    pack_slivers<mr>(weights, 1, in_channels, in_channels, out_channels, packed);
    T* gathered = scratch.take<pointwise_pixels_tag, T>(pointwise_pixels_count<T>(geometry, in_channels));
    T* zeros = gathered + in_channels * stride;
    std::fill(zeros, zeros + geometry.out_width(), T(0));
    for (std::size_t n = 0; n < batch; ++n) {
        // The weights as they lie are the transposed operand (out x in
        // channels).
        pointwise_product(in_channels, out_channels, packed, weights, in_channels, grad_y + n * out_channels * pixels,
                          pixels, pixels, false, gathered, stride, T(0));
        scatter_even_pixels(geometry, in_channels, gathered, zeros, grad_x + n * in_values, beta);
    }
}

} // namespace petra::kernels::detail
