// Two-dimensional convolution of NCHW batches (kernel 1x1 or 3x3, stride 1 or
// 2, zero padding): forward, gradient with respect to the input and gradient
// with respect to the weights.
//
// No im2col matrix is ever built. The input (or, for the input gradient, the
// output gradient) is copied once with its zero border into stride x stride
// phase planes, where every weight tap reads consecutive memory for
// consecutive output pixels. Forward and input gradient are then direct
// correlations on the GEMM micro-kernel, which loads those slices in place
// and multiplies them by the packed weights; the weight gradient takes dot
// products of the same slices with the output gradient.
//
// Index names: a tap index q stands for one weight tap (ci, kh, kw),
// q = (ci * K + kh) * K + kw; a "wide" pixel index j = row * plane_width +
// column runs over the full width of a phase plane, whose columns past the
// output width are computed or summed with zeros, never stored.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <string>

#include <petra/kernels/gemm.hpp>
#include <petra/kernels/profile.hpp>
#include <petra/kernels/simd.hpp>

namespace petra::kernels {

// Geometry of one convolution. Input: batch x in_channels x in_height x
// in_width; weights: out_channels x in_channels x kernel x kernel; output:
// batch x out_channels x out_height() x out_width().
struct convolution_shape {
    std::size_t batch;
    std::size_t in_channels;
    std::size_t in_height;
    std::size_t in_width;
    std::size_t out_channels;
    std::size_t kernel;
    std::size_t stride;
    std::size_t padding;

    constexpr std::size_t out_height() const { return (in_height + 2 * padding - kernel) / stride + 1; }
    constexpr std::size_t out_width() const { return (in_width + 2 * padding - kernel) / stride + 1; }
    constexpr std::size_t output_pixels() const { return out_height() * out_width(); }
    constexpr std::size_t input_pixels() const { return in_height * in_width; }
    // Taps of one output value: in_channels * kernel * kernel.
    constexpr std::size_t patch_size() const { return in_channels * kernel * kernel; }
    constexpr std::size_t weight_count() const { return out_channels * patch_size(); }
    constexpr std::size_t input_count() const { return batch * in_channels * input_pixels(); }
    constexpr std::size_t output_count() const { return batch * out_channels * output_pixels(); }
    // Multiply-adds of the forward pass counted as two operations each; each
    // of the two gradients costs the same.
    constexpr std::size_t flops() const { return 2 * output_count() * patch_size(); }
};

// Throws std::invalid_argument, naming the offending field, unless the shape
// is one the kernels support: every size positive, kernel 1 or 3, stride 1 or
// 2, padding smaller than the kernel, and the padded input at least as large
// as the kernel.
inline void validate(const convolution_shape& shape)
{
    auto fail = [](const std::string& what) {
        throw std::invalid_argument("petra::kernels convolution: " + what);
    };
    if (shape.in_channels == 0 || shape.out_channels == 0) fail("channel counts must be positive");
    if (shape.in_height == 0 || shape.in_width == 0) fail("the input height and width must be positive");
    if (shape.kernel != 1 && shape.kernel != 3) fail("kernel must be 1 or 3, got " + std::to_string(shape.kernel));
    if (shape.stride != 1 && shape.stride != 2) fail("stride must be 1 or 2, got " + std::to_string(shape.stride));
    if (shape.padding >= shape.kernel) {
        fail("padding must be smaller than the kernel, got " + std::to_string(shape.padding));
    }
    if (shape.in_height + 2 * shape.padding < shape.kernel || shape.in_width + 2 * shape.padding < shape.kernel) {
        fail("the padded input is smaller than the kernel");
    }
}

namespace detail {

// The sizes a profile record of a convolution is keyed by (see
// kernels/profile.hpp), and how they read.
inline constexpr const char* convolution_geometry = "%zux%zu s%zu, %zu -> %zu channels, %zux%zu input, batch %zu";

inline profile::sizes convolution_sizes(const convolution_shape& shape)
{
    return {shape.kernel,       shape.kernel,    shape.stride,   shape.in_channels,
            shape.out_channels, shape.in_height, shape.in_width, shape.batch};
}

// Bytes of the profile record: each array argument once, read or written,
// plus once more for the output that beta != 0 reads.
template <class T>
double convolution_bytes(std::size_t read, std::size_t written, T beta)
{
    return double(sizeof(T)) * double(read + written * (beta == T(0) ? 1 : 2));
}

// Positions origin + t * stride along one axis, for t in [0, length), with
// origin possibly negative: returns the range [begin, end) of t whose
// position lies in [0, extent).
struct tap_range {
    std::size_t begin;
    std::size_t end;
};

inline tap_range valid_taps(std::ptrdiff_t origin, std::size_t stride, std::size_t length, std::size_t extent)
{
    const auto step = static_cast<std::ptrdiff_t>(stride);
    const auto count = static_cast<std::ptrdiff_t>(length);
    // First t with origin + t * step >= 0, and first t with origin + t * step >= extent.
    std::ptrdiff_t begin = origin >= 0 ? 0 : (-origin + step - 1) / step;
    const std::ptrdiff_t limit = static_cast<std::ptrdiff_t>(extent) - origin;
    std::ptrdiff_t end = limit <= 0 ? 0 : (limit + step - 1) / step;
    begin = std::min(begin, count);
    end = std::clamp(end, begin, count);
    return {static_cast<std::size_t>(begin), static_cast<std::size_t>(end)};
}

// Decomposition of a patch index q into its tap (channel, kernel row, kernel column).
struct tap {
    std::size_t channel;
    std::size_t row;
    std::size_t column;
};

inline tap tap_of(const convolution_shape& shape, std::size_t q)
{
    const std::size_t taps = shape.kernel * shape.kernel;
    return {q / taps, (q % taps) / shape.kernel, q % shape.kernel};
}

// The input, copied once with a zero border of `padding` on every side and
// split into stride x stride phase planes: phase (a, b) of a channel holds
// the padded values at rows a, a + stride, a + 2 stride, ... and columns b,
// b + stride, .... Tap (kh, kw) of the convolution then reads, for output
// pixel (oh, ow), phase (kh % stride, kw % stride) at row oh + kh / stride and
// column ow + kw / stride: consecutive output pixels read consecutive memory
// whatever the stride, and no tap needs a bounds check. With stride 1 there is
// one phase, the padded image itself. The buffer ends with two vectors of
// zeros: readers load whole vectors, which run up to (kernel - 1) / stride +
// simd_width - 1 elements past a plane (see forward_accumulate and
// weight_gradient).
template <class T>
struct phased_input {
    const T* data;
    std::size_t stride;
    std::size_t in_channels;
    std::size_t height; // of one phase plane
    std::size_t width;  // of one phase plane

    std::size_t plane() const { return height * width; }
    std::size_t image_stride() const { return in_channels * stride * stride * plane(); }
    // Where tap k reads for output pixel (0, 0) of image 0; output pixel
    // (oh, ow) of image n is then image n * image_stride() + oh * width + ow
    // further.
    const T* tap_origin(const tap& k) const
    {
        const std::size_t phase = (k.row % stride) * stride + k.column % stride;
        return data + (k.channel * stride * stride + phase) * plane() + (k.row / stride) * width + k.column / stride;
    }
};

struct phased_input_tag {};

template <class T>
phased_input<T> prepare_input(const convolution_shape& shape, const T* input)
{
    const std::size_t stride = shape.stride, padding = shape.padding;
    const std::size_t height = (shape.in_height + 2 * padding + stride - 1) / stride;
    const std::size_t width = (shape.in_width + 2 * padding + stride - 1) / stride;
    const std::size_t plane = height * width;
    const std::size_t planes = shape.batch * shape.in_channels * stride * stride;
    constexpr std::size_t slack = 2 * simd_width<T>;
    T* phased = thread_scratch<phased_input_tag, T>(planes * plane + slack);
    std::fill(phased, phased + planes * plane + slack, T(0));
    // Phase rows and columns from `kernel` on hold values no tap reads (a 1x1
    // kernel with stride 2 reads phase (0, 0) only): they stay zero.
    const std::size_t phases_read = std::min(stride, shape.kernel);
    for (std::size_t channel = 0; channel < shape.batch * shape.in_channels; ++channel) {
        const T* source = input + channel * shape.input_pixels();
        for (std::size_t phase_row = 0; phase_row < phases_read; ++phase_row) {
            for (std::size_t phase_column = 0; phase_column < phases_read; ++phase_column) {
                T* target = phased + (channel * stride * stride + phase_row * stride + phase_column) * plane;
                // Phase column c holds padded column c * stride + phase_column,
                // that is input column c * stride + phase_column - padding,
                // inside the input for c in [first_column, end_column).
                const std::size_t first_column = (padding > phase_column ? padding - phase_column + stride - 1 : 0) / stride;
                const std::size_t end_column =
                    std::min(width, (shape.in_width + padding - phase_column + stride - 1) / stride);
                for (std::size_t row = 0; row < height; ++row) {
                    const std::size_t padded_row = row * stride + phase_row;
                    if (padded_row < padding || padded_row - padding >= shape.in_height) continue;
                    const T* source_row = source + (padded_row - padding) * shape.in_width;
                    T* target_row = target + row * width;
                    if (stride == 1) {
                        std::memcpy(target_row + padding, source_row, shape.in_width * sizeof(T));
                        continue;
                    }
                    const T* first_source = source_row + (first_column * stride + phase_column - padding);
                    for (std::size_t column = first_column; column < end_column; ++column) {
                        target_row[column] = first_source[(column - first_column) * stride];
                    }
                }
            }
        }
    }
    return {phased, stride, shape.in_channels, height, width};
}

// c[r][s] += sum over images i and d < depth of a_i[r][d] * b_i[s][d], for
// r < RowsA and s < RowsB: dot products of rows that are contiguous along the
// depth. Row r of a for image i starts at a + i * a_image_stride +
// r * a_row_stride and is aligned; row s of b for image i starts at
// b_rows[s] + i * b_image_stride, aligned or not. depth is a multiple of the
// vector width (callers pad a with zeros, so whatever b holds past its rows is
// multiplied by zero).
template <class T, std::size_t RowsA, std::size_t RowsB>
inline void dot_product_tile(std::size_t images, std::size_t depth, const T* a, std::size_t a_row_stride,
                             std::size_t a_image_stride, const T* const* b_rows, std::size_t b_image_stride, T* c,
                             std::size_t ldc)
{
    using vector = simd<T>;
    vector accumulator[RowsA][RowsB];
#pragma GCC unroll 8
    for (std::size_t r = 0; r < RowsA; ++r) {
#pragma GCC unroll 8
        for (std::size_t s = 0; s < RowsB; ++s) accumulator[r][s] = vector(T(0));
    }
    for (std::size_t image = 0; image < images; ++image) {
        const T* a_image = a + image * a_image_stride;
        const T* b_image[RowsB];
#pragma GCC unroll 8
        for (std::size_t s = 0; s < RowsB; ++s) b_image[s] = b_rows[s] + image * b_image_stride;
        for (std::size_t d = 0; d < depth; d += vector::size) {
            vector a_values[RowsA];
#pragma GCC unroll 8
            for (std::size_t r = 0; r < RowsA; ++r) a_values[r] = vector::load_aligned(a_image + r * a_row_stride + d);
#pragma GCC unroll 8
            for (std::size_t s = 0; s < RowsB; ++s) {
                const vector b_values = vector::load_unaligned(b_image[s] + d);
#pragma GCC unroll 8
                for (std::size_t r = 0; r < RowsA; ++r) {
                    accumulator[r][s] = xsimd::fma(a_values[r], b_values, accumulator[r][s]);
                }
            }
        }
    }
    for (std::size_t r = 0; r < RowsA; ++r) {
        for (std::size_t s = 0; s < RowsB; ++s) c[r * ldc + s] += lane_sum(accumulator[r][s]);
    }
}

// Tile of accumulate_dot_products: rows_a rows of a (streamed from L2) times
// rows_b rows of b (kept in L1 while every block of a passes by).
template <class T>
struct dot_product_blocking {
    static constexpr bool wide = gemm_blocking<T>::wide_register_file;
    // 24 accumulators, four A vectors and one B vector fit 32 registers;
    // 8 accumulators and their operands fit 16.
    static constexpr std::size_t rows_a = wide ? 4 : 2;
    static constexpr std::size_t rows_b = wide ? 6 : 4;
    // Depth (over all images of a chunk) for which rows_b rows of b stay
    // within 24 KiB of L1 (1024 floats).
    static constexpr std::size_t max_depth = (24u << 10) / (rows_b * sizeof(T));
};

// c (m x n, row stride ldc) += the dot products of dot_product_tile, for rows
// r < m of a and rows s < n of b, where b_row(s) gives the start of row s for
// the first image.
template <class T, class RowOfB>
void accumulate_dot_products(std::size_t m, std::size_t n, std::size_t images, std::size_t depth, const T* a,
                             std::size_t a_row_stride, std::size_t a_image_stride, RowOfB&& b_row,
                             std::size_t b_image_stride, T* c, std::size_t ldc)
{
    constexpr std::size_t tile_a = dot_product_blocking<T>::rows_a, tile_b = dot_product_blocking<T>::rows_b;
    auto rows_of_a = [&]<std::size_t RowsB>(std::size_t j) {
        const T* b_rows[RowsB];
        for (std::size_t s = 0; s < RowsB; ++s) b_rows[s] = b_row(j + s);
        std::size_t i = 0;
        for (; i + tile_a <= m; i += tile_a) {
            dot_product_tile<T, tile_a, RowsB>(images, depth, a + i * a_row_stride, a_row_stride, a_image_stride,
                                               b_rows, b_image_stride, c + i * ldc + j, ldc);
        }
        for (; i < m; ++i) {
            dot_product_tile<T, 1, RowsB>(images, depth, a + i * a_row_stride, a_row_stride, a_image_stride, b_rows,
                                          b_image_stride, c + i * ldc + j, ldc);
        }
    };
    std::size_t j = 0;
    for (; j + tile_b <= n; j += tile_b) rows_of_a.template operator()<tile_b>(j);
    for (; j < n; ++j) rows_of_a.template operator()<1>(j);
}

struct weight_gradient_outputs_tag {};

// Weight gradient without any im2col copy: grad_weights[co][q] = sum over
// output pixels j of grad_output(co, j) * patches(q, j), as dot products along
// the pixels. Output pixels are indexed over the width of a phase plane,
// j = oh * phase_width + ow, so that the patch row of tap q is a contiguous
// slice of the phased input starting at the tap's origin. The output gradient
// is copied to the same indexing with zeros in the columns ow >= out_width and
// past the last row, which cancels whatever those positions of the slices
// hold. (A slice may run up to a vector past its plane, into the next plane
// or the buffer's zero slack: with finite inputs the product is zero; an
// infinity or NaN there would reach this channel's gradient as NaN.)
template <class T>
void weight_gradient(const convolution_shape& shape, const phased_input<T>& input, const T* grad_output,
                     T* grad_weights)
{
    constexpr std::size_t width = simd_width<T>;
    const std::size_t out_height = shape.out_height(), out_width = shape.out_width();
    const std::size_t depth = (out_height * input.width + width - 1) / width * width;
    const std::size_t images_per_chunk =
        std::clamp<std::size_t>(dot_product_blocking<T>::max_depth / depth, 1, shape.batch);
    const std::size_t image_stride = shape.out_channels * depth;
    T* outputs = thread_scratch<weight_gradient_outputs_tag, T>(images_per_chunk * image_stride);
    for (std::size_t first_image = 0; first_image < shape.batch; first_image += images_per_chunk) {
        const std::size_t images = std::min(images_per_chunk, shape.batch - first_image);
        for (std::size_t image = 0; image < images; ++image) {
            for (std::size_t co = 0; co < shape.out_channels; ++co) {
                T* row = outputs + image * image_stride + co * depth;
                const T* source = grad_output + ((first_image + image) * shape.out_channels + co) * shape.output_pixels();
                std::fill(row, row + depth, T(0));
                for (std::size_t oh = 0; oh < out_height; ++oh) {
                    std::memcpy(row + oh * input.width, source + oh * out_width, out_width * sizeof(T));
                }
            }
        }
        const std::size_t first_offset = first_image * input.image_stride();
        accumulate_dot_products(
            shape.out_channels, shape.patch_size(), images, depth, static_cast<const T*>(outputs), depth, image_stride,
            [&](std::size_t q) { return input.tap_origin(tap_of(shape, q)) + first_offset; }, input.image_stride(),
            grad_weights, shape.patch_size());
    }
}

template <class T>
void scale_in_place(T* values, std::size_t count, T beta)
{
    if (beta == T(0)) {
        std::fill(values, values + count, T(0));
    } else if (beta != T(1)) {
        for (std::size_t i = 0; i < count; ++i) values[i] *= beta;
    }
}

// Calls visit(row, column, length, offset) for the pieces of wide pixels
// [j0, j0 + count), indexed j = row * row_width + column, that lie within one
// row; offset is the position of the piece's first pixel in the span.
template <class Visit>
void for_each_wide_row(std::size_t row_width, std::size_t j0, std::size_t count, Visit&& visit)
{
    for (std::size_t j = j0; j < j0 + count;) {
        const std::size_t row = j / row_width, column = j % row_width;
        const std::size_t length = std::min(row_width - column, j0 + count - j);
        visit(row, column, length, j - j0);
        j += length;
    }
}

// A correlation read in place, on the GEMM micro-kernel: for every image n,
// result channel c < channels and wide pixel j < wide_pixels,
//   result(n, c, j) = sum over taps t < taps of weights(c, t)
//                     * source[n * image_stride + offsets[t] + j],
// with the weights packed as mr-row slivers over the taps. Each mr x nr tile
// goes to store(image, c0, rows, j0, columns, tile) (tile row stride nr),
// for result channels [c0, c0 + rows) and wide pixels [j0, j0 + columns).
// The micro-kernel loads whole vectors, so source must stay readable
// simd_width - 1 elements past the last pixel it is asked for.
template <class T, class Store>
void direct_correlation(std::size_t images, const T* source, std::size_t image_stride, const std::size_t* offsets,
                        std::size_t taps, const T* packed_weights, std::size_t channels, std::size_t wide_pixels,
                        Store&& store)
{
    using blocking = gemm_blocking<T>;
    constexpr std::size_t mr = blocking::mr, nr = blocking::nr;
    alignas(buffer_alignment) T tile[mr * nr];
    for (std::size_t image = 0; image < images; ++image) {
        const T* image_source = source + image * image_stride;
        for (std::size_t j = 0; j < wide_pixels; j += nr) {
            const std::size_t columns = std::min(nr, wide_pixels - j);
            for (std::size_t c0 = 0; c0 < channels; c0 += mr) {
                micro_kernel_for_columns<T, mr, blocking::vectors_per_row>(
                    columns, taps, packed_weights + c0 * taps, offset_rows<T>{image_source + j, offsets}, tile);
                store(image, c0, std::min(mr, channels - c0), j, columns, static_cast<const T*>(tile));
            }
        }
    }
}

// out[t] = in[t] + beta * out[t] for t < count (out not read when beta == 0),
// in whole vectors with a scalar tail.
template <class T>
inline void store_row(std::size_t count, const T* in, T* out, T beta)
{
    using vector = simd<T>;
    const std::size_t vector_end = count - count % vector::size; // see detail::map in elementwise.hpp
    std::size_t t = 0;
    if (beta == T(0)) {
        for (; t < vector_end; t += vector::size) vector::load_unaligned(in + t).store_unaligned(out + t);
        for (; t < count; ++t) out[t] = in[t];
    } else {
        const vector scale(beta);
        for (; t < vector_end; t += vector::size) {
            xsimd::fma(scale, vector::load_unaligned(out + t), vector::load_unaligned(in + t)).store_unaligned(out + t);
        }
        for (; t < count; ++t) out[t] = xsimd::fma(beta, out[t], in[t]);
    }
}

struct direct_weights_tag {};
struct tap_offsets_tag {};

// output = convolution(input, weights) + beta * output, for a validated shape
// with a non-empty batch (output not read when beta == 0).
//
// A direct convolution: output pixels of an image are indexed over the width
// of a phase plane, j = oh * phase_width + ow, so that what tap q reads for
// pixels j, j + 1, ... is a contiguous slice of the phased input, at the
// tap's origin; only the weights are packed. Columns with ow >= out_width are
// computed from real (finite) input values and not stored: 2 / out_width of
// the work for a 3x3 kernel with padding 1.
template <class T>
void forward_accumulate(const convolution_shape& shape, const T* input, const T* weights, T* output, T beta)
{
    constexpr std::size_t mr = gemm_blocking<T>::mr, nr = gemm_blocking<T>::nr;
    const phased_input<T> phased = prepare_input(shape, input);
    const std::size_t taps = shape.patch_size(), channels = shape.out_channels;
    T* packed_weights = thread_scratch<direct_weights_tag, T>((channels + mr - 1) / mr * mr * taps);
    pack_slivers<mr>(weights, taps, 1, channels, taps, packed_weights);
    std::size_t* offsets = thread_scratch<tap_offsets_tag, std::size_t>(taps);
    for (std::size_t q = 0; q < taps; ++q) {
        offsets[q] = static_cast<std::size_t>(phased.tap_origin(tap_of(shape, q)) - phased.data);
    }
    const std::size_t out_width = shape.out_width(), pixels = shape.output_pixels();
    direct_correlation(
        shape.batch, phased.data, phased.image_stride(), offsets, taps, static_cast<const T*>(packed_weights),
        channels, shape.out_height() * phased.width,
        [&](std::size_t image, std::size_t c0, std::size_t rows, std::size_t j0, std::size_t columns, const T* tile) {
            for_each_wide_row(phased.width, j0, columns, [&](std::size_t row, std::size_t column, std::size_t length,
                                                             std::size_t offset) {
                if (column >= out_width) return;
                length = std::min(length, out_width - column);
                for (std::size_t r = 0; r < rows; ++r) {
                    store_row(length, tile + r * nr + offset,
                              output + ((image * channels + c0 + r) * pixels + row * out_width + column), beta);
                }
            });
        });
}

struct phase_source_tag {};
struct phase_weights_tag {};

// grad_input = input gradient of the convolution + beta * grad_input, for a
// validated shape with a non-empty batch (grad_input not read when beta == 0).
//
// Input positions are split into the stride x stride phases of the padded
// input: padded position (y, x) = (stride * r + a, stride * c + b) is reached
// only through taps kh = a + stride * u, kw = b + stride * v, from output pixel
// (r - u, c - v). So phase (a, b) of the input gradient is a stride-1
// correlation of the output gradient with those taps, flipped:
//   grad(stride r + a, stride c + b) = sum over co, u, v of
//       weights[co][ci][a + stride u][b + stride v] * grad_output[co][r - u][c - v],
// which direct_correlation computes in place from a copy of grad_output with
// `border` zero rows and columns in front. With stride 1 this is the classic
// convolution with transposed, flipped weights. Only phase rows that land
// inside the image are computed.
template <class T>
void backward_input_by_phases(const convolution_shape& shape, const T* grad_output, const T* weights,
                              T* grad_input, T beta)
{
    constexpr std::size_t mr = gemm_blocking<T>::mr, nr = gemm_blocking<T>::nr;
    const std::size_t stride = shape.stride, kernel = shape.kernel, padding = shape.padding;
    const std::size_t in_channels = shape.in_channels, out_channels = shape.out_channels;
    const std::size_t height = shape.in_height, width = shape.in_width;
    // Phase rows r whose input row stride * r + a - padding lies in
    // [0, height) form [first(a), end(a)), and likewise for columns; all
    // phases together need rows [first_row, end_row) and columns
    // [first_column, end_column). The copy of grad_output has `border` zero
    // rows and columns in front for the taps u, v <= border, so that result
    // row r reads copy row r - first_row + border - u.
    auto first_index = [&](std::size_t phase) {
        return padding > phase ? (padding - phase + stride - 1) / stride : std::size_t(0);
    };
    auto end_index = [&](std::size_t phase, std::size_t extent) {
        return (extent + padding - phase + stride - 1) / stride;
    };
    const std::size_t phases = std::min(stride, kernel);
    const std::size_t first_row = first_index(phases - 1), end_row = end_index(0, height);
    const std::size_t first_column = first_index(phases - 1), end_column = end_index(0, width);
    const std::size_t border = (kernel + stride - 1) / stride - 1;
    const std::size_t source_width = end_column - first_column + border;
    const std::size_t source_plane = (end_row - first_row + border) * source_width;
    const std::size_t out_height = shape.out_height(), out_width = shape.out_width();
    T* source = thread_scratch<phase_source_tag, T>(shape.batch * out_channels * source_plane + 2 * simd_width<T>);
    std::fill(source, source + shape.batch * out_channels * source_plane + 2 * simd_width<T>, T(0));
    // Output pixel (oh, ow) lands at copy row oh + border - first_row and
    // column ow + border - first_column. These are never negative: first_row
    // and first_column are at most ceil((padding - stride + 1) / stride),
    // which padding < kernel keeps within border.
    for (std::size_t plane = 0; plane < shape.batch * out_channels; ++plane) {
        for (std::size_t oh = 0; oh < out_height; ++oh) {
            std::memcpy(source + plane * source_plane + (oh + border - first_row) * source_width + border - first_column,
                        grad_output + (plane * out_height + oh) * out_width, out_width * sizeof(T));
        }
    }
    // A kernel smaller than the stride (1x1, stride 2) leaves phases that no
    // tap reaches: their gradient is zero, so scale everything first and
    // accumulate the phases that have taps.
    if (kernel < stride) {
        scale_in_place(grad_input, shape.input_count(), beta);
        beta = T(1);
    }
    const std::size_t max_taps = out_channels * (border + 1) * (border + 1);
    T* matrix = thread_scratch<phase_weights_tag, T>(in_channels * max_taps + (in_channels + mr - 1) / mr * mr * max_taps);
    T* packed = matrix + in_channels * max_taps;
    std::size_t* offsets = thread_scratch<tap_offsets_tag, std::size_t>(max_taps);
    for (std::size_t a = 0; a < std::min(stride, kernel); ++a) {
        for (std::size_t b = 0; b < std::min(stride, kernel); ++b) {
            const std::size_t taps_u = (kernel - a + stride - 1) / stride, taps_v = (kernel - b + stride - 1) / stride;
            const std::size_t taps = out_channels * taps_u * taps_v;
            // Tap (u, v) reads copy row (result row - first_row) + border - u.
            for (std::size_t co = 0; co < out_channels; ++co) {
                for (std::size_t u = 0; u < taps_u; ++u) {
                    for (std::size_t v = 0; v < taps_v; ++v) {
                        const std::size_t t = (co * taps_u + u) * taps_v + v;
                        offsets[t] = co * source_plane + (border - u) * source_width + (border - v);
                        for (std::size_t ci = 0; ci < in_channels; ++ci) {
                            matrix[ci * taps + t] =
                                weights[((co * in_channels + ci) * kernel + a + stride * u) * kernel + b + stride * v];
                        }
                    }
                }
            }
            pack_slivers<mr>(static_cast<const T*>(matrix), taps, 1, in_channels, taps, packed);
            const std::size_t phase_first_row = first_index(a), phase_end_row = end_index(a, height);
            if (phase_first_row >= phase_end_row) continue;
            // Wide pixel (row, column) of this phase is result row
            // phase_first_row + row, result column first_column + column.
            direct_correlation(
                shape.batch, static_cast<const T*>(source + (phase_first_row - first_row) * source_width),
                out_channels * source_plane, offsets, taps, static_cast<const T*>(packed), in_channels,
                (phase_end_row - phase_first_row) * source_width,
                [&](std::size_t image, std::size_t c0, std::size_t rows, std::size_t j0, std::size_t columns,
                    const T* tile) {
                    for_each_wide_row(source_width, j0, columns, [&](std::size_t row, std::size_t column,
                                                                     std::size_t length, std::size_t offset) {
                        const std::size_t y = (phase_first_row + row) * stride + a - padding;
                        const std::ptrdiff_t origin = static_cast<std::ptrdiff_t>((first_column + column) * stride + b) -
                                                      static_cast<std::ptrdiff_t>(padding);
                        const tap_range valid = valid_taps(origin, stride, length, width);
                        if (valid.begin == valid.end) return;
                        const std::size_t count = valid.end - valid.begin;
                        const std::size_t x = static_cast<std::size_t>(origin + static_cast<std::ptrdiff_t>(valid.begin * stride));
                        for (std::size_t r = 0; r < rows; ++r) {
                            T* out = grad_input + ((image * in_channels + c0 + r) * height + y) * width + x;
                            const T* in = tile + r * nr + offset + valid.begin;
                            if (stride == 1) {
                                store_row(count, in, out, beta);
                            } else {
                                for (std::size_t t = 0; t < count; ++t) {
                                    T& target = out[t * stride];
                                    target = beta == T(0) ? in[t] : in[t] + beta * target;
                                }
                            }
                        }
                    });
                });
        }
    }
}

} // namespace detail

// output = convolution of input with weights (no bias): for every image n,
// output channel co and output pixel (oh, ow),
//   output[n][co][oh][ow] = sum over ci, kh, kw of weights[co][ci][kh][kw]
//                           * input[n][ci][oh * stride + kh - padding][ow * stride + kw - padding],
// reading zero outside the input. Every element of output is written.
template <class T>
void convolution_forward(const convolution_shape& shape, const T* input, const T* weights, T* output)
{
    PETRA_PROFILE_KERNEL("convolution forward", detail::convolution_geometry, detail::convolution_sizes(shape),
                         double(shape.flops()),
                         detail::convolution_bytes(shape.input_count() + shape.weight_count(), shape.output_count(),
                                                   T(0)));
    validate(shape);
    if (shape.batch == 0) return;
    detail::forward_accumulate(shape, input, weights, output, T(0));
}

// grad_input = (gradient of the forward pass with respect to its input,
// applied to grad_output) + beta * grad_input. With beta == 0, grad_input is
// not read on entry. Computed phase by phase as stride-1 correlations of
// grad_output (see detail::backward_input_by_phases).
template <class T>
void convolution_backward_input(const convolution_shape& shape, const T* grad_output, const T* weights,
                                T* grad_input, T beta = T(0))
{
    PETRA_PROFILE_KERNEL("convolution input gradient", detail::convolution_geometry,
                         detail::convolution_sizes(shape), double(shape.flops()),
                         detail::convolution_bytes(shape.output_count() + shape.weight_count(), shape.input_count(),
                                                   beta));
    validate(shape);
    if (shape.batch == 0) return;
    detail::backward_input_by_phases(shape, grad_output, weights, grad_input, beta);
}

// grad_weights = (gradient of the forward pass with respect to its weights,
// applied to grad_output, summed over the batch) + beta * grad_weights. With
// beta == 0, grad_weights is not read on entry; beta == 1 accumulates.
template <class T>
void convolution_backward_weights(const convolution_shape& shape, const T* input, const T* grad_output,
                                  T* grad_weights, T beta = T(0))
{
    PETRA_PROFILE_KERNEL("convolution weight gradient", detail::convolution_geometry,
                         detail::convolution_sizes(shape), double(shape.flops()),
                         detail::convolution_bytes(shape.input_count() + shape.output_count(), shape.weight_count(),
                                                   beta));
    validate(shape);
    detail::scale_in_place(grad_weights, shape.weight_count(), beta);
    if (shape.batch == 0) return;
    detail::weight_gradient(shape, detail::prepare_input(shape, input), grad_output, grad_weights);
}

} // namespace petra::kernels
