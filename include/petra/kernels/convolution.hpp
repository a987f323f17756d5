// Two-dimensional convolution of NCHW batches (kernel 1x1 or 3x3, stride 1 or
// 2, zero padding): forward, gradient with respect to the input and gradient
// with respect to the weights.
//
// All three run on the packed GEMM engine of gemm.hpp. Rather than building an
// im2col matrix and packing it again, the convolution supplies packers that
// read the image directly into the engine's slivers, and stores that write
// (or scatter-add) tiles straight into NCHW tensors: one pass over the data.
//
// Index names: the batch is N, a result column j stands for one output pixel
// (image n, row oh, column ow) of all images in a row, j = (n * OH + oh) * OW + ow,
// and a patch index q stands for one weight tap (ci, kh, kw),
// q = (ci * K + kh) * K + kw.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <string>

#include <petra/kernels/gemm.hpp>
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

// A run of consecutive output pixels within one output row: columns
// [column, column + length) of row `row` of image `image`; `offset` is the
// position of its first pixel in the span of result columns being visited.
struct output_run {
    std::size_t image;
    std::size_t row;
    std::size_t column;
    std::size_t length;
    std::size_t offset;
};

// Calls visit(run) for the runs that cover result columns [j0, j0 + count).
template <class Visit>
void for_each_output_run(const convolution_shape& shape, std::size_t j0, std::size_t count, Visit&& visit)
{
    const std::size_t width = shape.out_width();
    const std::size_t pixels = shape.output_pixels();
    std::size_t image = j0 / pixels;
    std::size_t row = (j0 % pixels) / width;
    std::size_t column = j0 % width;
    for (std::size_t offset = 0; offset < count;) {
        const std::size_t length = std::min(width - column, count - offset);
        visit(output_run{image, row, column, length, offset});
        offset += length;
        column = 0;
        if (++row == shape.out_height()) {
            row = 0;
            ++image;
        }
    }
}

// Calls visit(image, first_pixel, length, offset) for the pieces of result
// columns [j0, j0 + count) that lie within one image.
template <class Visit>
void for_each_image_span(std::size_t pixels, std::size_t j0, std::size_t count, Visit&& visit)
{
    std::size_t image = j0 / pixels;
    std::size_t pixel = j0 % pixels;
    for (std::size_t offset = 0; offset < count;) {
        const std::size_t length = std::min(pixels - pixel, count - offset);
        visit(image, pixel, length, offset);
        offset += length;
        pixel = 0;
        ++image;
    }
}

// The input coordinates that output positions first .. first + length - 1
// (stride apart) read along one axis are origin + t * stride for t in
// [0, length), where origin = first * stride + tap - padding may be negative.
// Returns the range [begin, end) of t whose coordinate lies in [0, extent).
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

// B operand of the input gradient: B(co, j) = grad_output of channel co at
// output pixel j; contiguous within an image.
template <class T>
struct output_gradient_packer {
    convolution_shape shape;
    const T* grad_output;

    void operator()(std::size_t c0, std::size_t depth, std::size_t j0, std::size_t columns, T* destination) const
    {
        constexpr std::size_t nr = gemm_blocking<T>::nr;
        const std::size_t pixels = shape.output_pixels();
        for (std::size_t first = 0; first < columns; first += nr) {
            const std::size_t width = std::min(nr, columns - first);
            for (std::size_t d = 0; d < depth; ++d) {
                T* row = destination + d * nr;
                for_each_image_span(pixels, j0 + first, width, [&](std::size_t image, std::size_t pixel,
                                                                   std::size_t length, std::size_t offset) {
                    const T* source = grad_output + (image * shape.out_channels + c0 + d) * pixels + pixel;
                    std::memcpy(row + offset, source, length * sizeof(T));
                });
                std::fill(row + width, row + nr, T(0));
            }
            destination += depth * nr;
        }
    }
};

// col2im: adds tiles of the patch-gradient matrix (rows: taps q, columns:
// output pixels j) to the input gradient at the input position each tap read.
template <class T>
struct col2im_store {
    convolution_shape shape;
    T* grad_input;

    void operator()(std::size_t q0, std::size_t j0, std::size_t rows, std::size_t columns, const T* tile,
                    bool /*first*/) const
    {
        constexpr std::size_t nr = gemm_blocking<T>::nr;
        for_each_output_run(shape, j0, columns, [&](const output_run& run) {
            for (std::size_t r = 0; r < rows; ++r) {
                const tap k = tap_of(shape, q0 + r);
                const auto input_row = static_cast<std::ptrdiff_t>(run.row * shape.stride + k.row) -
                                       static_cast<std::ptrdiff_t>(shape.padding);
                if (input_row < 0 || input_row >= static_cast<std::ptrdiff_t>(shape.in_height)) continue;
                T* target = grad_input +
                            ((run.image * shape.in_channels + k.channel) * shape.in_height +
                             static_cast<std::size_t>(input_row)) *
                                shape.in_width;
                const std::ptrdiff_t origin = static_cast<std::ptrdiff_t>(run.column * shape.stride + k.column) -
                                              static_cast<std::ptrdiff_t>(shape.padding);
                const tap_range valid = valid_taps(origin, shape.stride, run.length, shape.in_width);
                if (valid.begin == valid.end) continue;
                T* out = target + (origin + static_cast<std::ptrdiff_t>(valid.begin * shape.stride));
                const T* in = tile + r * nr + run.offset;
                for (std::size_t t = valid.begin; t < valid.end; ++t) {
                    out[(t - valid.begin) * shape.stride] += in[t];
                }
            }
        });
    }
};

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

struct direct_weights_tag {};
struct tap_offsets_tag {};

// output = convolution(input, weights) + beta * output, for a validated shape
// with a non-empty batch (output not read when beta == 0).
//
// A direct convolution on the GEMM micro-kernel: A is the weights, packed
// once; B is never packed. Output pixels of an image are indexed over the
// width of a phase plane, j = oh * phase_width + ow, so that row q of B (what
// tap q reads for pixels j, j + 1, ...) is a contiguous slice of the phased
// input and the micro-kernel loads it in place. Columns with ow >= out_width
// are computed from real (finite) input values and not stored: 2 / out_width
// of the work for a 3x3 kernel with padding 1.
template <class T>
void forward_accumulate(const convolution_shape& shape, const T* input, const T* weights, T* output, T beta)
{
    using blocking = gemm_blocking<T>;
    constexpr std::size_t mr = blocking::mr, nr = blocking::nr;
    const phased_input<T> phased = prepare_input(shape, input);
    const std::size_t taps = shape.patch_size(), channels = shape.out_channels;
    T* packed_weights = thread_scratch<direct_weights_tag, T>((channels + mr - 1) / mr * mr * taps);
    pack_slivers<mr>(weights, taps, 1, channels, taps, packed_weights, taps * mr);
    std::size_t* offsets = thread_scratch<tap_offsets_tag, std::size_t>(taps);
    for (std::size_t q = 0; q < taps; ++q) {
        offsets[q] = static_cast<std::size_t>(phased.tap_origin(tap_of(shape, q)) - phased.data);
    }
    const std::size_t out_width = shape.out_width(), row_width = phased.width, pixels = shape.output_pixels();
    const std::size_t wide_pixels = shape.out_height() * row_width;
    alignas(buffer_alignment) T tile[mr * nr];
    for (std::size_t image = 0; image < shape.batch; ++image) {
        const T* source = phased.data + image * phased.image_stride();
        T* image_output = output + image * channels * pixels;
        for (std::size_t j = 0; j < wide_pixels; j += nr) {
            const std::size_t columns = std::min(nr, wide_pixels - j);
            for (std::size_t c0 = 0; c0 < channels; c0 += mr) {
                const std::size_t rows = std::min(mr, channels - c0);
                micro_kernel_for_columns<T, mr, blocking::vectors_per_row>(
                    columns, taps, packed_weights + c0 * taps, offset_rows<T>{source + j, offsets}, tile);
                // Store the columns that are real pixels, one output row at a time.
                for (std::size_t column = j; column < j + columns;) {
                    const std::size_t row = column / row_width, first = column % row_width;
                    const std::size_t row_end = std::min(j + columns, (row + 1) * row_width);
                    const std::size_t length = first < out_width ? std::min(out_width - first, row_end - column) : 0;
                    for (std::size_t r = 0; r < rows && length > 0; ++r) {
                        T* out = image_output + (c0 + r) * pixels + row * out_width + first;
                        const T* in = tile + r * nr + (column - j);
                        if (beta == T(0)) {
                            for (std::size_t t = 0; t < length; ++t) out[t] = in[t];
                        } else {
                            for (std::size_t t = 0; t < length; ++t) out[t] = in[t] + beta * out[t];
                        }
                    }
                    column = row_end;
                }
            }
        }
    }
}

struct flipped_weights_tag {};

} // namespace detail

// output = convolution of input with weights (no bias): for every image n,
// output channel co and output pixel (oh, ow),
//   output[n][co][oh][ow] = sum over ci, kh, kw of weights[co][ci][kh][kw]
//                           * input[n][ci][oh * stride + kh - padding][ow * stride + kw - padding],
// reading zero outside the input. Every element of output is written.
template <class T>
void convolution_forward(const convolution_shape& shape, const T* input, const T* weights, T* output)
{
    validate(shape);
    if (shape.batch == 0) return;
    detail::forward_accumulate(shape, input, weights, output, T(0));
}

// grad_input = (gradient of the forward pass with respect to its input,
// applied to grad_output) + beta * grad_input. With beta == 0, grad_input is
// not read on entry.
//
// With stride 1 the input gradient is itself a stride-1 convolution: of
// grad_output, with the weights transposed (input and output channels
// swapped) and flipped (kernel rows and columns reversed), and padding
// kernel - 1 - padding. It then runs on the forward path. With stride 2, or
// with fewer input channels than the GEMM tile has rows (the stem), the patch
// gradients are computed by GEMM and scattered back (col2im).
template <class T>
void convolution_backward_input(const convolution_shape& shape, const T* grad_output, const T* weights,
                                T* grad_input, T beta = T(0))
{
    validate(shape);
    if (shape.batch == 0) return;
    const std::size_t patch = shape.patch_size();
    if (shape.stride == 1 && shape.in_channels >= gemm_blocking<T>::mr) {
        const std::size_t k = shape.kernel;
        T* flipped = thread_scratch<detail::flipped_weights_tag, T>(shape.weight_count());
        for (std::size_t co = 0; co < shape.out_channels; ++co)
            for (std::size_t ci = 0; ci < shape.in_channels; ++ci)
                for (std::size_t kh = 0; kh < k; ++kh)
                    for (std::size_t kw = 0; kw < k; ++kw) {
                        flipped[((ci * shape.out_channels + co) * k + (k - 1 - kh)) * k + (k - 1 - kw)] =
                            weights[((co * shape.in_channels + ci) * k + kh) * k + kw];
                    }
        const convolution_shape transposed{shape.batch,       shape.out_channels, shape.out_height(),
                                           shape.out_width(), shape.in_channels,  k,
                                           1,                 k - 1 - shape.padding};
        detail::forward_accumulate(transposed, grad_output, static_cast<const T*>(flipped), grad_input, beta);
        return;
    }
    detail::scale_in_place(grad_input, shape.input_count(), beta);
    packed_gemm<T>(patch, shape.batch * shape.output_pixels(), shape.out_channels,
                   matrix_a_packer<T>{weights, matrix_strides(patch, transpose::yes)},
                   detail::output_gradient_packer<T>{shape, grad_output}, detail::col2im_store<T>{shape, grad_input});
}

// grad_weights = (gradient of the forward pass with respect to its weights,
// applied to grad_output, summed over the batch) + beta * grad_weights. With
// beta == 0, grad_weights is not read on entry; beta == 1 accumulates.
template <class T>
void convolution_backward_weights(const convolution_shape& shape, const T* input, const T* grad_output,
                                  T* grad_weights, T beta = T(0))
{
    validate(shape);
    const std::size_t pixels = shape.batch * shape.output_pixels();
    if (pixels == 0) {
        detail::scale_in_place(grad_weights, shape.weight_count(), beta);
        return;
    }
    detail::scale_in_place(grad_weights, shape.weight_count(), beta);
    detail::weight_gradient(shape, detail::prepare_input(shape, input), grad_output, grad_weights);
}

} // namespace petra::kernels
