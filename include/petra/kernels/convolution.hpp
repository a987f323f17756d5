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

// Copies the input values that one tap reads for one run of output pixels,
// out[t * out_stride] for t in [0, run.length), zero where the tap falls in
// the padding. `plane` is the input channel plane of the run's image.
template <class T>
void gather_tap(const convolution_shape& shape, const T* plane, const tap& k, const output_run& run, T* out,
                std::size_t out_stride)
{
    const auto input_row =
        static_cast<std::ptrdiff_t>(run.row * shape.stride + k.row) - static_cast<std::ptrdiff_t>(shape.padding);
    if (input_row < 0 || input_row >= static_cast<std::ptrdiff_t>(shape.in_height)) {
        for (std::size_t t = 0; t < run.length; ++t) out[t * out_stride] = T(0);
        return;
    }
    const T* source = plane + static_cast<std::size_t>(input_row) * shape.in_width;
    const std::ptrdiff_t origin = static_cast<std::ptrdiff_t>(run.column * shape.stride + k.column) -
                                  static_cast<std::ptrdiff_t>(shape.padding);
    const tap_range valid = valid_taps(origin, shape.stride, run.length, shape.in_width);
    for (std::size_t t = 0; t < valid.begin; ++t) out[t * out_stride] = T(0);
    if (valid.begin < valid.end) {
        const T* first = source + (origin + static_cast<std::ptrdiff_t>(valid.begin * shape.stride));
        if (shape.stride == 1 && out_stride == 1) {
            std::memcpy(out + valid.begin, first, (valid.end - valid.begin) * sizeof(T));
        } else {
            for (std::size_t t = valid.begin; t < valid.end; ++t) {
                out[t * out_stride] = first[(t - valid.begin) * shape.stride];
            }
        }
    }
    for (std::size_t t = valid.end; t < run.length; ++t) out[t * out_stride] = T(0);
}

// B operand of the forward pass: the im2col matrix, B(q, j) = input value
// that tap q reads for output pixel j, packed straight from the image.
template <class T>
struct im2col_packer {
    convolution_shape shape;
    const T* input;

    void operator()(std::size_t q0, std::size_t depth, std::size_t j0, std::size_t columns, T* destination) const
    {
        constexpr std::size_t nr = gemm_blocking<T>::nr;
        for (std::size_t first = 0; first < columns; first += nr) {
            const std::size_t width = std::min(nr, columns - first);
            for (std::size_t d = 0; d < depth; ++d) {
                const tap k = tap_of(shape, q0 + d);
                T* out = destination + d * nr;
                for_each_output_run(shape, j0 + first, width, [&](const output_run& run) {
                    const T* plane =
                        input + (run.image * shape.in_channels + k.channel) * shape.input_pixels();
                    gather_tap(shape, plane, k, run, out + run.offset, 1);
                });
                for (std::size_t lane = width; lane < nr; ++lane) out[lane] = T(0);
            }
            destination += depth * nr;
        }
    }
};

// Writes tiles of the forward result (rows: output channels, columns: output
// pixels) into the NCHW output: overwrite on the first depth block, add on
// the others.
template <class T>
struct nchw_store {
    convolution_shape shape;
    T* output;

    void operator()(std::size_t i0, std::size_t j0, std::size_t rows, std::size_t columns, const T* tile,
                    bool first) const
    {
        constexpr std::size_t nr = gemm_blocking<T>::nr;
        const std::size_t pixels = shape.output_pixels();
        for_each_image_span(pixels, j0, columns, [&](std::size_t image, std::size_t pixel, std::size_t length,
                                                     std::size_t offset) {
            for (std::size_t r = 0; r < rows; ++r) {
                T* out = output + (image * shape.out_channels + i0 + r) * pixels + pixel;
                const T* in = tile + r * nr + offset;
                if (first) {
                    std::memcpy(out, in, length * sizeof(T));
                } else {
                    for (std::size_t t = 0; t < length; ++t) out[t] += in[t];
                }
            }
        });
    }
};

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
                T* out = destination + d * nr;
                for_each_image_span(pixels, j0 + first, width, [&](std::size_t image, std::size_t pixel,
                                                                   std::size_t length, std::size_t offset) {
                    const T* source = grad_output + (image * shape.out_channels + c0 + d) * pixels + pixel;
                    std::memcpy(out + offset, source, length * sizeof(T));
                });
                for (std::size_t lane = width; lane < nr; ++lane) out[lane] = T(0);
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

// A operand of the weight gradient: A(co, j) = grad_output of channel co at
// output pixel j, packed over the depth (pixels) one image span at a time.
template <class T>
struct output_gradient_rows_packer {
    convolution_shape shape;
    const T* grad_output;

    void operator()(std::size_t c0, std::size_t rows, std::size_t j0, std::size_t depth, T* destination) const
    {
        constexpr std::size_t mr = gemm_blocking<T>::mr;
        const std::size_t pixels = shape.output_pixels();
        for_each_image_span(pixels, j0, depth, [&](std::size_t image, std::size_t pixel, std::size_t length,
                                                   std::size_t offset) {
            const T* source = grad_output + (image * shape.out_channels + c0) * pixels + pixel;
            pack_slivers<mr>(source, pixels, 1, rows, length, destination + offset * mr, depth * mr);
        });
    }
};

// B operand of the weight gradient: the transposed im2col matrix,
// B(j, q) = input value that tap q reads for output pixel j.
template <class T>
struct im2col_transposed_packer {
    convolution_shape shape;
    const T* input;

    void operator()(std::size_t j0, std::size_t depth, std::size_t q0, std::size_t columns, T* destination) const
    {
        constexpr std::size_t nr = gemm_blocking<T>::nr;
        for (std::size_t first = 0; first < columns; first += nr) {
            const std::size_t width = std::min(nr, columns - first);
            for_each_output_run(shape, j0, depth, [&](const output_run& run) {
                T* out = destination + run.offset * nr;
                for (std::size_t lane = 0; lane < width; ++lane) {
                    const tap k = tap_of(shape, q0 + first + lane);
                    const T* plane = input + (run.image * shape.in_channels + k.channel) * shape.input_pixels();
                    gather_tap(shape, plane, k, run, out + lane, nr);
                }
                for (std::size_t t = 0; t < run.length; ++t) {
                    for (std::size_t lane = width; lane < nr; ++lane) out[t * nr + lane] = T(0);
                }
            });
            destination += depth * nr;
        }
    }
};

template <class T>
void scale_in_place(T* values, std::size_t count, T beta)
{
    if (beta == T(0)) {
        std::fill(values, values + count, T(0));
    } else if (beta != T(1)) {
        for (std::size_t i = 0; i < count; ++i) values[i] *= beta;
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
    validate(shape);
    if (shape.batch == 0) return;
    const std::size_t patch = shape.patch_size();
    packed_gemm<T>(shape.out_channels, shape.batch * shape.output_pixels(), patch,
                   matrix_a_packer<T>{weights, matrix_strides(patch, transpose::no)},
                   detail::im2col_packer<T>{shape, input}, detail::nchw_store<T>{shape, output});
}

// grad_input = (gradient of the forward pass with respect to its input,
// applied to grad_output) + beta * grad_input. With beta == 0, grad_input is
// not read on entry.
template <class T>
void convolution_backward_input(const convolution_shape& shape, const T* grad_output, const T* weights,
                                T* grad_input, T beta = T(0))
{
    validate(shape);
    if (shape.batch == 0) return;
    detail::scale_in_place(grad_input, shape.input_count(), beta);
    const std::size_t patch = shape.patch_size();
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
    const std::size_t patch = shape.patch_size();
    packed_gemm<T>(shape.out_channels, patch, pixels, detail::output_gradient_rows_packer<T>{shape, grad_output},
                   detail::im2col_transposed_packer<T>{shape, input},
                   matrix_store<T>{grad_weights, patch, T(1), beta});
}

} // namespace petra::kernels
