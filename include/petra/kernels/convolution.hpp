// Two-dimensional convolution of NCHW batches (kernel 1x1 or 3x3, stride 1 or
// 2, zero padding): forward, gradient with respect to the input and gradient
// with respect to the weights.
//
// 3x3 convolutions with stride 1 and padding 1 between 8 or more channels
// (the input's filling more than half of their vectors) take Winograd's
// form instead (winograd.hpp; winograd_applies below); everything that
// follows here describes the direct form, which every other shape takes.
//
// No im2col matrix is ever built. The input (or, for the input gradient, the
// output gradient) is copied once with its zero border into stride x stride
// phase planes, where every weight tap reads consecutive memory for
// consecutive output pixels, a few images at a time (chunk_images). Forward
// and input gradient are then direct correlations on the GEMM micro-kernel,
// which loads those slices in place and multiplies them by the packed
// weights; the weight gradient takes dot products of the same slices with
// the output gradient. A 1x1 kernel with stride 2 and no padding, whose one
// phase is every other value of every other input row, takes matrix
// products image by image for its forward and input gradient
// (pointwise.hpp); its weight gradient reads the input in place
// (weight_gradient_reads_in_place).
//
// Index names: a tap index q stands for one weight tap (ci, kh, kw),
// q = (ci * K + kh) * K + kw; a "wide" pixel index j = row * plane_width +
// column runs over the full width of a phase plane, whose columns past the
// output width are computed or summed with zeros, never stored.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstring>
#include <numeric>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

#include <petra/error.hpp>
#include <petra/kernels/cache_sizes.hpp>
#include <petra/kernels/gemm.hpp>
#include <petra/kernels/input_map.hpp>
#include <petra/kernels/layout.hpp>
#include <petra/kernels/pointwise.hpp>
#include <petra/kernels/profile.hpp>
#include <petra/kernels/reduction.hpp>
#include <petra/kernels/scratch.hpp>
#include <petra/kernels/simd.hpp>
#include <petra/kernels/winograd.hpp>

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
        raise_error(error_kind::invalid_argument, "petra::kernels convolution: " + what);
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
// one phase, the padded image itself; a 1x1 kernel with stride 2 reads phase
// (0, 0) only, and only that one is kept. The buffer ends with two vectors of
// zeros: readers load whole vectors, which run up to (kernel - 1) / stride +
// simd_width - 1 elements past a plane (see forward_accumulate and
// weight_gradient).
template <class T>
struct phased_input {
    const T* data;
    std::size_t stride;
    std::size_t phases; // per axis: the stride, or 1 for a 1x1 kernel, which reads phase (0, 0) only
    std::size_t in_channels;
    std::size_t height; // of one phase plane
    std::size_t width;  // of one phase plane

    std::size_t plane() const { return height * width; }
    std::size_t image_stride() const { return in_channels * phases * phases * plane(); }
    // Where tap k reads for output pixel (0, 0) of image 0; output pixel
    // (oh, ow) of image n is then image n * image_stride() + oh * width + ow
    // further.
    const T* tap_origin(const tap& k) const
    {
        const std::size_t phase = (k.row % stride) * phases + k.column % stride;
        return data + (k.channel * phases * phases + phase) * plane() + (k.row / stride) * width + k.column / stride;
    }
};

struct phased_input_tag {};

// Whether the forward and the input gradient take pointwise.hpp's matrix
// products, image by image: a 1x1 kernel with stride 2 (and so no padding).
constexpr bool uses_pointwise_products(const convolution_shape& shape)
{
    return shape.kernel == 1 && shape.stride == 2 && shape.padding == 0;
}

constexpr pointwise_geometry pointwise_geometry_of(const convolution_shape& shape)
{
    return {shape.in_channels, shape.out_channels, shape.in_height, shape.in_width};
}

constexpr patch_geometry patch_geometry_of(const convolution_shape& shape)
{
    return {shape.in_channels, shape.out_channels, shape.in_height, shape.in_width, shape.padding};
}

// Whether the forward takes pointwise.hpp's patch products, image by image:
// a 3x3 kernel with stride 2 where takes_patch_products accepts the sizes.
template <class T>
constexpr bool uses_patch_products(const convolution_shape& shape)
{
    return shape.kernel == 3 && shape.stride == 2 && takes_patch_products<T>(patch_geometry_of(shape));
}
// Whether the input gradient takes them: where takes_patch_input_gradient
// accepts the sizes too.
template <class T>
constexpr bool uses_patch_input_gradient(const convolution_shape& shape)
{
    return shape.kernel == 3 && shape.stride == 2 && takes_patch_input_gradient<T>(patch_geometry_of(shape));
}

// Phases a tap reads along each axis: the stride, but one for a 1x1 kernel
// (whose only tap reads phase (0, 0)), so that the phased input holds only
// planes some tap reads.
constexpr std::size_t phases_read(const convolution_shape& shape) { return std::min(shape.stride, shape.kernel); }

// Height and width of one phase plane, and values of the phased input with
// its slack.
constexpr std::size_t phase_height(const convolution_shape& shape)
{
    return (shape.in_height + 2 * shape.padding + shape.stride - 1) / shape.stride;
}
constexpr std::size_t phase_width(const convolution_shape& shape)
{
    return (shape.in_width + 2 * shape.padding + shape.stride - 1) / shape.stride;
}
template <class T>
constexpr std::size_t phased_input_count(const convolution_shape& shape)
{
    const std::size_t phases = phases_read(shape);
    return shape.batch * shape.in_channels * phases * phases * phase_height(shape) * phase_width(shape) +
           2 * simd_width<T>;
}

// Whether a convolution can read its input where it lies, without the
// phased copy (prepare_input_into): a 1x1 kernel with stride 2 and no
// padding, whose one tap reads input row 2 oh, column 2 ow for output pixel
// (oh, ow), so that every other value of every other row is the one phase
// plane the copy would hold. The weight gradient takes it (see
// weight_gradient_reads_in_place), on AVX-512 for float, where it was
// measured. (The forward pass read in place too, a row's even columns
// gathered into a vector by one permutation of two masked loads, and ran
// 1.4 times slower than copying first; bench/RESULTS.md.)
template <class T>
inline constexpr bool can_read_input_in_place =
#if defined(__AVX512F__)
    std::is_same_v<T, float>;
#else
    false;
#endif

template <class T>
constexpr bool reads_input_in_place(const convolution_shape& shape)
{
    return can_read_input_in_place<T> && shape.kernel == 1 && shape.stride == 2 && shape.padding == 0;
}

// The phase planes of a stride-2 input (prepare_input_into) written to
// phased: every plane zeroed, then each input row's values split into the
// two phase columns.
template <class T>
void split_stride_two(const convolution_shape& shape, const T* input, T* phased)
{
    const std::size_t padding = shape.padding, phases = phases_read(shape);
    const std::size_t width = phase_width(shape), plane = phase_height(shape) * width;
    const std::size_t planes = shape.batch * shape.in_channels * phases * phases;
    // A 1x1 kernel (padding 0) keeps phase (0, 0) only, which the even rows'
    // even columns fill whole; a 3x3 kernel's planes have zero borders.
    if (shape.kernel != 1) std::fill(phased, phased + planes * plane, T(0));
    // Stride 2 (the only other the kernels take): input row i is padded row
    // i + padding, row (i + padding) / 2 of phase row (i + padding) % 2; its
    // even and odd columns go likewise to the two phase columns, which
    // split_row_stride_two writes in one pass; values of phases no tap reads
    // (rows and columns of phase 1 for a 1x1 kernel) are left out. (Zeroing
    // only the planes' borders instead of every plane first measured slower:
    // a row's border is one or two values. Zeroing each phase row's border
    // beside its values, every value written once, measured 0.98 times the
    // speed of this on an Intel Xeon, in a training step. Rows of at most 16
    // floats take split_stride_two_by_row_gathers instead: one store each.)
    const std::size_t even_phase = padding % 2, odd_phase = (padding + 1) % 2;
    for (std::size_t channel = 0; channel < shape.batch * shape.in_channels; ++channel) {
        const T* source = input + channel * shape.input_pixels();
        for (std::size_t row = 0; row < shape.in_height; ++row) {
            const std::size_t phase_row = (row + padding) % 2;
            if (phase_row >= phases) continue;
            T* target = phased + (channel * phases + phase_row) * phases * plane + (row + padding) / 2 * width;
            split_row_stride_two(shape.in_width, source + row * shape.in_width,
                                 even_phase < phases ? target + even_phase * plane + padding / 2 : nullptr,
                                 odd_phase < phases ? target + odd_phase * plane + (padding + 1) / 2 : nullptr);
        }
    }
}

#if defined(__AVX512F__)
// split_stride_two's planes with every phase row written whole, once, its
// zeros with it (padded_row_gather): for phase rows of at most 16 floats.
// The same values.
inline void split_stride_two_by_row_gathers(const convolution_shape& shape, const float* input, float* phased)
{
    const std::size_t phases = phases_read(shape), height = phase_height(shape), width = phase_width(shape);
    const std::size_t plane = height * width;
    const auto padding = static_cast<std::ptrdiff_t>(shape.padding);
    // Lane c of phase column b is padded column 2 c + b, input column 2 c + b - padding.
    const padded_row_gather columns[2] = {{width, 2, -padding, shape.in_width},
                                          {width, 2, 1 - padding, shape.in_width}};
    for (std::size_t channel = 0; channel < shape.batch * shape.in_channels; ++channel) {
        const float* source = input + channel * shape.input_pixels();
        float* target = phased + channel * phases * phases * plane;
        for (std::size_t a = 0; a < phases; ++a) {
            for (std::size_t r = 0; r < height; ++r) {
                // Phase row a's row r is padded row 2 r + a.
                const std::ptrdiff_t row = static_cast<std::ptrdiff_t>(2 * r + a) - padding;
                float* phase_row = target + a * phases * plane + r * width;
                const bool inside = row >= 0 && row < static_cast<std::ptrdiff_t>(shape.in_height);
                for (std::size_t b = 0; b < phases; ++b) {
                    if (inside) {
                        columns[b](source + static_cast<std::size_t>(row) * shape.in_width, phase_row + b * plane);
                    } else {
                        columns[b].zero(phase_row + b * plane);
                    }
                }
            }
        }
    }
}
#endif

// The phased input of shape's batch written to phased, which holds
// phased_input_count<T>(shape) values.
template <class T>
phased_input<T> prepare_input_into(const convolution_shape& shape, const T* input, T* phased)
{
    const std::size_t stride = shape.stride, padding = shape.padding, phases = phases_read(shape);
    const std::size_t height = phase_height(shape);
    const std::size_t width = phase_width(shape);
    const std::size_t plane = height * width;
    const std::size_t planes = shape.batch * shape.in_channels * phases * phases;
    constexpr std::size_t slack = 2 * simd_width<T>;
    std::fill(phased + planes * plane, phased + planes * plane + slack, T(0));
    const phased_input<T> result{phased, stride, phases, shape.in_channels, height, width};
    if (stride == 1) {
        // One pass: each padded row is its border zeros and an input row.
        for (std::size_t channel = 0; channel < planes; ++channel) {
            const T* source = input + channel * shape.input_pixels();
            T* target = phased + channel * plane;
            std::fill(target, target + padding * width, T(0));
            for (std::size_t row = 0; row < shape.in_height; ++row) {
                T* target_row = target + (row + padding) * width;
                std::fill(target_row, target_row + padding, T(0));
                std::memcpy(target_row + padding, source + row * shape.in_width, shape.in_width * sizeof(T));
                std::fill(target_row + padding + shape.in_width, target_row + width, T(0));
            }
            std::fill(target + (shape.in_height + padding) * width, target + plane, T(0));
        }
        return result;
    }
#if defined(__AVX512F__)
    if constexpr (std::is_same_v<T, float>) {
        if (padded_row_gather::fits(width, shape.in_width)) {
            split_stride_two_by_row_gathers(shape, input, phased);
            return result;
        }
    }
#endif
    split_stride_two(shape, input, phased);
    return result;
}

template <class T>
phased_input<T> prepare_input(const convolution_shape& shape, const T* input, scratch_source& scratch)
{
    return prepare_input_into(shape, input, scratch.take<phased_input_tag, T>(phased_input_count<T>(shape)));
}

// shape with another batch size.
constexpr convolution_shape with_batch(convolution_shape shape, std::size_t batch)
{
    shape.batch = batch;
    return shape;
}

// The direct kernels take a batch a few images at a time (chunk_images), so
// that what they write per image and read back (the phased input, a copy or
// transposition of the output gradient) stays in the core's L2 cache
// between the two instead of travelling to the next level and back: as
// many images as keep those buffers within the Winograd kernels' group
// budget (winograd_group_bytes, half of L2; at compile time its ceiling,
// which bounds every chunk a core takes, so that scratch demands hold). The
// images of a chunk are computed as the whole batch's were, in the same
// order: results do not depend on the chunk. On an Intel Xeon (model 167,
// 2 MiB of L2) the 3x3 stride-2 forward and weight gradient at 28x28 ran
// 1.1 to 1.2 times faster alone, and a step's 3x3 stride-2 kernels 1.12
// times (bench/RESULTS.md).
constexpr std::size_t chunk_images(std::size_t batch, std::size_t bytes_per_image)
{
    return std::clamp<std::size_t>(winograd_group_bytes() / std::max<std::size_t>(bytes_per_image, 1), 1,
                                   std::max<std::size_t>(batch, 1));
}

// The images patch_backward_input takes at a time: as many as keep their
// patches and results within the group budget (chunk_images), at most 8
// (at 7x7, 8 images' 392 columns of a phase leave the tiles half a vector).
template <class T>
constexpr std::size_t patch_group_images(const convolution_shape& shape)
{
    return std::min<std::size_t>(8, chunk_images(shape.batch, patch_phases::image_bytes<T>(patch_geometry_of(shape))));
}

// Calls body(part, input_offset, output_offset, chunk_scratch) for
// consecutive chunks of at most `images` images of shape's batch: part the
// chunk's shape (batch = its images), the offsets where its first image
// starts in shape's input and output (in values), chunk_scratch a copy of
// scratch: a chunk's buffers are dead when the next one starts, so every
// chunk takes the same memory again (a caller's region is carved once per
// chunk from the same start).
template <class Body>
void for_each_chunk(const convolution_shape& shape, std::size_t images, scratch_source& scratch, Body&& body)
{
    const std::size_t input_values = shape.in_channels * shape.input_pixels();
    const std::size_t output_values = shape.out_channels * shape.output_pixels();
    for (std::size_t first = 0; first < shape.batch; first += images) {
        scratch_source chunk_scratch = scratch;
        body(with_batch(shape, std::min(images, shape.batch - first)), first * input_values, first * output_values,
             chunk_scratch);
    }
}

// Register blocking of the weight gradient: Taps taps (broadcast from the
// phased input) times Vectors vectors of output channels, for Pixels
// neighbouring output pixels at once (each with accumulators of its own, so
// that a narrow channel count still gives the FMA units enough independent
// chains). 24 accumulators fit 32 vector registers with the channel vectors
// and the broadcast; 12 fit 16.
template <class T>
struct weight_gradient_blocking {
    static constexpr bool wide = gemm_blocking<T>::wide_register_file;
    static constexpr std::size_t accumulators = wide ? 24 : 12;
    static constexpr std::size_t taps = wide ? 6 : 3;
    // Output channels handled per pass: up to this many vectors.
    static constexpr std::size_t max_vectors = wide ? 4 : 2;
    static constexpr std::size_t pixels_for(std::size_t vectors)
    {
        return std::max<std::size_t>(1, accumulators / (taps * vectors));
    }
};

// sums[t][c] += sum over output rows [first_row, end_row) and the
// `row_length` output pixels of each row of tap t's input value at that pixel
// times the output gradient of channel c there, for t < Taps and the Vectors
// * W channels c of the pass, for one image. tap[t] points at tap t's value
// for pixel (0, 0) of the image in the phased input (row oh, pixel ow at +
// oh * plane_width + ow); gradients holds, for every row and pixel of the
// image, the channels' output gradients as contiguous vectors (pixel after
// pixel, channel_stride values each, row_length pixels per row, a multiple
// of Pixels). sums has rows of sum_stride values, one per tap. With
// ColumnStep 2 (a 1x1 stride-2 kernel reading its input in place) pixel ow
// of a row reads tap[t][oh * plane_width + 2 ow].
template <class T, std::size_t Taps, std::size_t Vectors, std::size_t Pixels, std::size_t ColumnStep>
void tap_group_gradient(std::size_t first_row, std::size_t end_row, std::size_t row_length, const T* const* tap,
                        std::size_t plane_width, const T* gradients, std::size_t channel_stride, T* sums,
                        std::size_t sum_stride)
{
    using vector = simd<T>;
    constexpr std::size_t width = vector::size;
    vector accumulator[Pixels][Taps][Vectors];
    PETRA_UNROLL(4)
    for (std::size_t p = 0; p < Pixels; ++p) {
        PETRA_UNROLL(8)
        for (std::size_t t = 0; t < Taps; ++t) {
            PETRA_UNROLL(4)
            for (std::size_t v = 0; v < Vectors; ++v) accumulator[p][t][v] = vector(T(0));
        }
    }
    for (std::size_t row = first_row; row < end_row; ++row) {
        const std::size_t row_offset = row * plane_width;
        const T* row_gradient = gradients + row * row_length * channel_stride;
        for (std::size_t pixel = 0; pixel < row_length; pixel += Pixels) {
            const T* pixel_gradient = row_gradient + pixel * channel_stride;
            PETRA_UNROLL(4)
            for (std::size_t p = 0; p < Pixels; ++p) {
                vector g[Vectors];
                PETRA_UNROLL(4)
                for (std::size_t v = 0; v < Vectors; ++v) {
                    g[v] = vector::load_aligned(pixel_gradient + p * channel_stride + v * width);
                }
                PETRA_UNROLL(8)
                for (std::size_t t = 0; t < Taps; ++t) {
                    const vector x(tap[t][row_offset + (pixel + p) * ColumnStep]);
                    PETRA_UNROLL(4)
                    for (std::size_t v = 0; v < Vectors; ++v) {
                        accumulator[p][t][v] = fused_multiply_add(x, g[v], accumulator[p][t][v]);
                    }
                }
            }
        }
    }
    PETRA_UNROLL(8)
    for (std::size_t t = 0; t < Taps; ++t) {
        PETRA_UNROLL(4)
        for (std::size_t v = 0; v < Vectors; ++v) {
            vector total = accumulator[0][t][v];
            PETRA_UNROLL(4)
            for (std::size_t p = 1; p < Pixels; ++p) total += accumulator[p][t][v];
            T* out = sums + t * sum_stride + v * width;
            (vector::load_aligned(out) + total).store_aligned(out);
        }
    }
}

// The bytes of output gradients a row block of tap_gradients holds: half
// of the smallest L1 data cache met (32 KiB). A constant, not the core's
// cache: each block's sums are added to the weight gradient on their own,
// so the block is part of the order of the additions, and a block drawn
// from the caches gave other values on cores with other caches. On a Zen 5
// core (48 KiB of L1d) it measured as half of that cache did
// (bench/RESULTS.md).
inline constexpr std::size_t weight_gradient_row_bytes = std::size_t(16) << 10;

// The passes of tap_group_gradient over every tap, for one block of Vectors
// channel vectors: image by image and a few rows at a time (so that those
// rows' gradients stay in L1 while every tap passes over them), groups of
// the blocking's tap count, then the remaining taps three and one at a time.
// image_tap holds taps pointers (the taps of the image at hand). The bytes
// of next_input (the next chunk's input, or none) are asked toward L2 in
// equal shares before each pass (prefetch_stream): in a training step the
// input comes from memory, and a chunk's phased copy of it waited on that
// (a Zen 5 core: the 28x28 stride-2 weight gradient with its input out of
// the caches 1.12 ms without, 0.82 ms with; 0.71 ms with it in cache).
struct image_tap_tag {};

template <class T, std::size_t Vectors, std::size_t ColumnStep>
void tap_gradients(std::size_t images, std::size_t rows, std::size_t row_length, const T* const* tap, std::size_t taps,
                   std::size_t image_stride, std::size_t plane_width, const T* gradients, std::size_t channel_stride,
                   T* sums, std::size_t sum_stride, const T** image_tap, std::span<const std::byte> next_input)
{
    using blocking = weight_gradient_blocking<T>;
    constexpr std::size_t pixels = blocking::pixels_for(Vectors);
    const std::size_t row_block =
        std::clamp<std::size_t>(weight_gradient_row_bytes / sizeof(T) / (row_length * channel_stride), 1, rows);
    // The passes of one row block, as the loop below groups the taps.
    const std::size_t passes = taps / blocking::taps + (blocking::taps > 3 ? taps % blocking::taps / 3 : 0) +
                               taps % blocking::taps % (blocking::taps > 3 ? 3 : blocking::taps);
    prefetch_stream prefetch(next_input, images * ((rows + row_block - 1) / row_block) * passes);
    for (std::size_t image = 0; image < images; ++image) {
        for (std::size_t t = 0; t < taps; ++t) image_tap[t] = tap[t] + image * image_stride;
        const T* image_gradients = gradients + image * rows * row_length * channel_stride;
        for (std::size_t first = 0; first < rows; first += row_block) {
            const std::size_t end = std::min(rows, first + row_block);
            auto pass = [&]<std::size_t Taps>(std::size_t t) {
                prefetch.advance();
                tap_group_gradient<T, Taps, Vectors, pixels, ColumnStep>(first, end, row_length, image_tap + t,
                                                                         plane_width, image_gradients, channel_stride,
                                                                         sums + t * sum_stride, sum_stride);
            };
            std::size_t t = 0;
            for (; t + blocking::taps <= taps; t += blocking::taps) pass.template operator()<blocking::taps>(t);
            if constexpr (blocking::taps > 3) {
                for (; t + 3 <= taps; t += 3) pass.template operator()<3>(t);
            }
            for (; t < taps; ++t) pass.template operator()<1>(t);
        }
    }
}

struct weight_gradient_outputs_tag {};
struct weight_gradient_sums_tag {};
struct weight_gradient_taps_tag {};

// Where weight_gradient puts the transposed output gradient of one image:
// channel_stride values per pixel (the channels padded with zeros to whole
// vectors), row_length pixels per row (the output width padded to a
// multiple of every pass's pixel block: the full passes of max_vectors
// vectors and the last one), out_height rows.
template <class T>
struct weight_gradient_layout {
    std::size_t channel_vectors;
    std::size_t channel_stride;
    std::size_t row_length;
    std::size_t image_values;

    constexpr explicit weight_gradient_layout(const convolution_shape& shape)
        : channel_vectors((shape.out_channels + simd_width<T> - 1) / simd_width<T>),
          channel_stride(channel_vectors * simd_width<T>), row_length(padded_row_length(shape, channel_vectors)),
          image_values(shape.out_height() * row_length * channel_stride)
    {}

private:
    static constexpr std::size_t padded_row_length(const convolution_shape& shape, std::size_t channel_vectors)
    {
        using blocking = weight_gradient_blocking<T>;
        const std::size_t last_pass = channel_vectors % blocking::max_vectors;
        const std::size_t pixel_block =
            std::lcm(blocking::pixels_for(std::min(channel_vectors, blocking::max_vectors)),
                     blocking::pixels_for(last_pass == 0 ? blocking::max_vectors : last_pass));
        return (shape.out_width() + pixel_block - 1) / pixel_block * pixel_block;
    }
};

// Whether weight_gradient reads a 1x1 stride-2 input in place
// (reads_input_in_place): where its rows need no padding pixels (the output
// width a multiple of the pixel block, as on the reference network's two
// downsamplings), whose reads would run past an input row and, on the last,
// past the input.
template <class T>
constexpr bool weight_gradient_reads_in_place(const convolution_shape& shape)
{
    return reads_input_in_place<T>(shape) && weight_gradient_layout<T>(shape).row_length == shape.out_width();
}

// The images weight_gradient takes at a time (chunk_images): those whose
// phased input (unless read in place) and transposed output gradient fit
// the budget.
template <class T>
constexpr std::size_t weight_gradient_chunk_images(const convolution_shape& shape)
{
    const std::size_t image_values = weight_gradient_layout<T>(shape).image_values;
    const std::size_t phased_values =
        weight_gradient_reads_in_place<T>(shape) ? 0 : phased_input_count<T>(with_batch(shape, 1));
    return chunk_images(shape.batch, (phased_values + image_values) * sizeof(T));
}

// Weight gradient, grad_weights[co][q] += sum over images and output pixels
// of grad_y(co, pixel) * patch value of tap q at that pixel, without an
// im2col copy. The output gradient is transposed once so that each output
// pixel holds its channels contiguously (padded with zero channels to whole
// vectors, and each row with zero pixels to a multiple of the pixel block);
// tap values are then broadcast from the phased input (or the input itself,
// see below), where tap q's values for consecutive pixels of a row are
// consecutive, and multiply whole vectors of channels (tap_group_gradient).
// The zero pixels past a row's end read phased values of the next columns
// or rows, or the buffer's zero slack: with finite inputs their products
// vanish. Phased input and transposition are made a chunk of images at a
// time (chunk_images); the sums run over the images in order whatever the
// chunks. A 1x1 stride-2 input is read in place where
// weight_gradient_reads_in_place says so: tap q is channel q's plane, its
// rows twice the input width apart and its pixels two values apart; the
// same products in the same order.
template <class T>
void weight_gradient(const convolution_shape& shape, const T* x, const T* grad_y, T* grad_weights,
                     scratch_source& scratch)
{
    using blocking = weight_gradient_blocking<T>;
    constexpr std::size_t width = simd_width<T>;
    const std::size_t out_height = shape.out_height(), out_width = shape.out_width();
    const std::size_t out_channels = shape.out_channels, taps = shape.patch_size();
    const weight_gradient_layout<T> layout(shape);
    const std::size_t channel_vectors = layout.channel_vectors, channel_stride = layout.channel_stride;
    const std::size_t row_length = layout.row_length, image_values = layout.image_values;
    const std::size_t chunk = weight_gradient_chunk_images<T>(shape);
    const bool in_place = weight_gradient_reads_in_place<T>(shape);
    T* phased_values =
        in_place ? nullptr : scratch.take<phased_input_tag, T>(phased_input_count<T>(with_batch(shape, chunk)));
    T* gradients = scratch.take<weight_gradient_outputs_tag, T>(chunk * image_values);
    const T** tap = scratch.take<weight_gradient_taps_tag, const T*>(taps);
    const T** image_tap = scratch.take<image_tap_tag, const T*>(taps);
    T* sums = scratch.take<weight_gradient_sums_tag, T>(taps * channel_stride);
    std::fill(sums, sums + taps * channel_stride, T(0));
    // The buffers above serve every chunk (the sums run on across them), so
    // no chunk takes scratch of its own.
    for_each_chunk(
        shape, chunk, scratch, [&](const convolution_shape& part, std::size_t in, std::size_t out, scratch_source&) {
            std::size_t image_stride = shape.in_channels * shape.input_pixels(), plane_width = 2 * shape.in_width;
            if (in_place) {
                for (std::size_t q = 0; q < taps; ++q) tap[q] = x + in + q * shape.input_pixels();
            } else {
                const phased_input<T> input = prepare_input_into(part, x + in, phased_values);
                for (std::size_t q = 0; q < taps; ++q) tap[q] = input.tap_origin(tap_of(shape, q));
                image_stride = input.image_stride();
                plane_width = input.width;
            }
            for (std::size_t image = 0; image < part.batch; ++image) {
                T* transposed = gradients + image * image_values;
                const T* source = grad_y + out + image * out_channels * shape.output_pixels();
                transpose_channels_to_rows(source, shape.output_pixels(), out_channels, shape.output_pixels(),
                                           transposed,
                                           pixel_rows{out_width, row_length * channel_stride, channel_stride});
                if (row_length != out_width) {
                    for (std::size_t oh = 0; oh < out_height; ++oh) {
                        T* row = transposed + oh * row_length * channel_stride;
                        std::fill(row + out_width * channel_stride, row + row_length * channel_stride, T(0));
                    }
                }
                // The zero channels that pad every pixel to whole vectors.
                if (channel_stride > out_channels) {
                    for (std::size_t pixel = 0; pixel < out_height * row_length; ++pixel) {
                        std::fill(transposed + pixel * channel_stride + out_channels,
                                  transposed + (pixel + 1) * channel_stride, T(0));
                    }
                }
            }
            // The next chunk's input on its way to L2 during the first
            // block of channels' passes (in a training step it comes from
            // memory).
            const std::size_t input_values = shape.in_channels * shape.input_pixels();
            const std::size_t next_first = in / input_values + part.batch;
            const std::span<const std::byte> next_input =
                images_bytes(x, input_values, next_first, std::min(chunk, shape.batch - next_first));
            const auto passes = [&]<std::size_t ColumnStep>() {
                for (std::size_t v0 = 0; v0 < channel_vectors; v0 += blocking::max_vectors) {
                    const std::size_t vectors = std::min(blocking::max_vectors, channel_vectors - v0);
                    ([&]<std::size_t... V>(std::index_sequence<V...>) {
                        ((vectors == V + 1
                              ? tap_gradients<T, V + 1, ColumnStep>(
                                    part.batch, out_height, row_length, tap, taps, image_stride, plane_width,
                                    gradients + v0 * width, channel_stride, sums + v0 * width, channel_stride,
                                    image_tap, v0 == 0 ? next_input : std::span<const std::byte>{})
                              : void()),
                         ...);
                    })(std::make_index_sequence<blocking::max_vectors>{});
                }
            };
            if constexpr (can_read_input_in_place<T>) {
                if (in_place) {
                    passes.template operator()<2>();
                    return;
                }
            }
            passes.template operator()<1>();
        });
    for (std::size_t co = 0; co < out_channels; ++co) {
        for (std::size_t q = 0; q < taps; ++q) grad_weights[co * taps + q] += sums[q * channel_stride + co];
    }
}

struct dot_product_sums_tag {};
struct tap_offsets_tag {};

// The weight gradient as dot products along the pixels, for 3x3 kernels
// over one to three input channels (a stem's: 9 to 27 taps) whose output
// rows fill their vectors: there weight_gradient's transposition of the
// output gradient to pixel-major order moves more memory than the products
// take time (two thirds of a stem's weight gradient on a Zen 5 core), where
// here both operands are read in place. A block of Channels output channels
// times Taps taps keeps a vector accumulator per pair; each step loads Taps
// vectors of tap values (from the phased input) and Channels vectors of
// output gradient (NCHW) for the same simd_width pixels of an output row, the
// row's last vector through a mask, so that no lane past a row is read.
// Measured against weight_gradient (Zen 5, batch 64, 300 calls, medians of
// 7 alternated runs): with -O3 the stem 1 -> 32 at 28x28 1.16 times faster,
// 3 -> 33 1.38 times; with -O2 1.7 and 1.15 to 1.26 times. 1x1 kernels of
// 16 and 32 taps (with 4 x 6 blocks, -O2) ran 1.2 to 1.3 times slower, so
// they keep weight_gradient. Also taken for 3x3 kernels of at most half a
// vector of output channels that Winograd's form does not take (there
// weight_gradient's vectors of output channels are half empty): since its
// loads are no longer folded, on a Zen 5 core (g++ -O2, batch 64, alone)
// 4 -> 8 channels at 28x28 2.7 times faster, 8 -> 8 at 14x14 to 112x112
// 1.6 to 2.2, 8 -> 4 and 16 -> 4 1.9 and 1.6, 40 -> 1 at 50x50 1.1; with
// stride 2 at 28x28 1.4 to 1.9, but 0.5 to 0.8 on inputs of more than 64K
// values an image (16 -> 8 at 112x112, 64 -> 8 at 56x56, 40 -> 8 at 50x50:
// the walk phases the whole batch first, where weight_gradient phases a
// chunk that its passes find in cache), which therefore keep weight_gradient;
// with 12 to 32 output channels it ran at 0.39 to 1.10 times the speed of
// the kernel taken (bench/RESULTS.md).
// Needs masked loads (AVX-512); elsewhere weight_gradient serves.
template <class T>
struct dot_product_blocking {
    static constexpr std::size_t channels = 8;
    static constexpr std::size_t taps = 3; // a divisor of a 3x3 kernel's taps
};

template <class T>
constexpr bool uses_dot_product_gradient(const convolution_shape& shape)
{
#if defined(__AVX512F__)
    constexpr std::size_t width = simd_width<T>;
    const std::size_t vectors = (shape.out_width() + width - 1) / width;
    const bool narrow_output =
        2 * shape.out_channels <= width && (shape.stride == 1 || shape.in_channels * shape.input_pixels() <= 65536);
    return shape.kernel == 3 && (shape.in_channels <= 3 || narrow_output) &&
           4 * shape.out_width() >= 3 * vectors * width;
#else
    (void)shape;
    return false;
#endif
}

#if defined(__AVX512F__)
// The pixels dot_product_block walks: `images` images, `runs` runs (output
// rows) of `length` pixels in each; an operand's values for image n, run r
// and pixel p at n * its image stride + r * its step + p.
struct dot_product_walk {
    std::size_t images, gradient_image, tap_image;
    std::size_t runs, length, gradient_step, tap_step;
};

// The first count values at `at` as a vector: a float vector through mask
// (first_lanes(count)), others through load_first.
template <class T, class Mask>
PETRA_ALWAYS_INLINE simd<T> load_counted(const T* at, std::size_t count, Mask mask)
{
    if constexpr (std::is_same_v<T, float>) {
        (void)count;
        return load_lanes(at, mask);
    } else {
        (void)mask;
        return load_first(at, count);
    }
}

// sums[c * Taps + t] += the lanes of the sum over the walk's pixels of
// gradient[c]'s value times tap[t]'s, the accumulators running on from
// sums (so that a batch walked in groups sums in the order of one walk).
// Vectors is the vectors of a run (1 to 4) or 0 where the run is longer: a
// run's vectors then unrolled, its last one's mask a constant of the walk.
template <class T, std::size_t Channels, std::size_t Taps, std::size_t Vectors>
void dot_product_block(const dot_product_walk& walk, const T* const (&gradient)[Channels], const T* const (&tap)[Taps],
                       simd<T>* sums)
{
    using vector = simd<T>;
    constexpr std::size_t width = vector::size;
    const std::size_t tail = walk.length % width == 0 ? width : walk.length % width;
    vector accumulator[Channels][Taps];
    PETRA_UNROLL(8)
    for (std::size_t c = 0; c < Channels; ++c) {
        PETRA_UNROLL(8)
        for (std::size_t t = 0; t < Taps; ++t) accumulator[c][t] = sums[c * Taps + t];
    }
    // Every float vector through a mask, and the whole vectors' mask not a
    // constant the compiler sees (it is all lanes wherever a run has more
    // than one vector): through a plain load, or a mask known to be whole,
    // g++ 12 folds the gradient's loads into each multiply-add (Taps loads
    // where one does), and the stem's weight gradient ran at 38% of the FMA
    // peak of a Zen 5 core (bench/RESULTS.md).
    const auto step = [&](std::size_t g0, std::size_t t0, std::size_t count, auto mask) {
        vector values[Taps];
        PETRA_UNROLL(8)
        for (std::size_t t = 0; t < Taps; ++t) values[t] = load_counted(tap[t] + t0, count, mask);
        PETRA_UNROLL(8)
        for (std::size_t c = 0; c < Channels; ++c) {
            const vector g = load_counted(gradient[c] + g0, count, mask);
            PETRA_UNROLL(8)
            for (std::size_t t = 0; t < Taps; ++t)
                accumulator[c][t] = fused_multiply_add(g, values[t], accumulator[c][t]);
        }
    };
    const std::size_t whole = std::min(walk.length, width);
    const auto whole_mask = first_lanes(whole), tail_mask = first_lanes(tail);
    for (std::size_t n = 0; n < walk.images; ++n) {
        for (std::size_t r = 0; r < walk.runs; ++r) {
            const std::size_t g0 = n * walk.gradient_image + r * walk.gradient_step;
            const std::size_t t0 = n * walk.tap_image + r * walk.tap_step;
            if constexpr (Vectors > 0) {
                PETRA_UNROLL(4)
                for (std::size_t v = 0; v + 1 < Vectors; ++v) step(g0 + v * width, t0 + v * width, whole, whole_mask);
                step(g0 + (Vectors - 1) * width, t0 + (Vectors - 1) * width, tail, tail_mask);
            } else {
                std::size_t p = 0;
                for (; p + width < walk.length; p += width) step(g0 + p, t0 + p, whole, whole_mask);
                step(g0 + p, t0 + p, tail, tail_mask);
            }
        }
    }
    PETRA_UNROLL(8)
    for (std::size_t c = 0; c < Channels; ++c) {
        PETRA_UNROLL(8)
        for (std::size_t t = 0; t < Taps; ++t) sums[c * Taps + t] = accumulator[c][t];
    }
}
#endif

// grad_weights[co][q] += the weight gradient, as dot products along the
// pixels (see uses_dot_product_gradient), a piece of the batch at a time: as
// many output rows (whole images where they fit) as keep a block of
// channels' output gradient and one input channel's rows within three
// quarters of the L1 data cache the kernels block for, while that block
// passes over them with every block of taps. (In groups of images within
// half of L2, every block of taps read the output gradient again from L2:
// the stem's weight gradient ran 1.2 times slower on a Zen 5 core,
// bench/RESULTS.md.) The sums run on from piece to piece, each accumulator
// over the pixels in the order of one walk: the values do not depend on the
// pieces.
// Channels and taps past the last are stood in for by the last (their sums
// are never read).
template <class T>
void dot_product_gradient(const convolution_shape& shape, const phased_input<T>& input, const T* grad_y,
                          T* grad_weights, scratch_source& scratch)
{
#if defined(__AVX512F__)
    using blocking = dot_product_blocking<T>;
    constexpr std::size_t block_channels = blocking::channels, block_taps = blocking::taps;
    const std::size_t channels = shape.out_channels, taps = shape.patch_size(), pixels = shape.output_pixels();
    const std::size_t channel_blocks = (channels + block_channels - 1) / block_channels;
    const std::size_t tap_blocks = (taps + block_taps - 1) / block_taps;
    const std::size_t block_sums = block_channels * block_taps;
    simd<T>* sums = scratch.take<dot_product_sums_tag, simd<T>>(channel_blocks * tap_blocks * block_sums);
    std::fill(sums, sums + channel_blocks * tap_blocks * block_sums, simd<T>(T(0)));
    std::size_t* offsets = scratch.take<tap_offsets_tag, std::size_t>(taps);
    for (std::size_t q = 0; q < taps; ++q) {
        offsets[q] = static_cast<std::size_t>(input.tap_origin(tap_of(shape, q)) - input.data);
    }
    const std::size_t out_height = shape.out_height(), out_width = shape.out_width();
    // A piece's block of channels' output gradient is read by every block of
    // taps, one input channel's rows (a row of each of its phase planes per
    // output row) by the blocks of that channel's taps.
    const std::size_t row_bytes = (block_channels * out_width + input.phases * input.phases * input.width) * sizeof(T);
    const std::size_t budget_rows = std::max<std::size_t>(1, blocking_caches().l1_data * 3 / 4 / row_bytes);
    const std::size_t pieces_per_image = (out_height + budget_rows - 1) / budget_rows;
    const std::size_t piece_rows = (out_height + pieces_per_image - 1) / pieces_per_image;
    const std::size_t piece_images = pieces_per_image == 1 ? budget_rows / out_height : 1;
    for (std::size_t first = 0; first < shape.batch; first += piece_images) {
        for (std::size_t first_row = 0; first_row < out_height; first_row += piece_rows) {
            const dot_product_walk walk{.images = std::min(piece_images, shape.batch - first),
                                        .gradient_image = channels * pixels,
                                        .tap_image = input.image_stride(),
                                        .runs = std::min(piece_rows, out_height - first_row),
                                        .length = out_width,
                                        .gradient_step = out_width,
                                        .tap_step = input.width};
            const T* piece_input = input.data + first * input.image_stride() + first_row * input.width;
            for (std::size_t cb = 0; cb < channel_blocks; ++cb) {
                const T* gradient[block_channels];
                for (std::size_t c = 0; c < block_channels; ++c) {
                    const std::size_t co = std::min(cb * block_channels + c, channels - 1);
                    gradient[c] = grad_y + (first * channels + co) * pixels + first_row * out_width;
                }
                for (std::size_t tb = 0; tb < tap_blocks; ++tb) {
                    const T* tap[block_taps];
                    for (std::size_t t = 0; t < block_taps; ++t) {
                        tap[t] = piece_input + offsets[std::min(tb * block_taps + t, taps - 1)];
                    }
                    simd<T>* block = sums + (cb * tap_blocks + tb) * block_sums;
                    switch ((walk.length + simd_width<T> - 1) / simd_width<T>) {
                    case 1: dot_product_block<T, block_channels, block_taps, 1>(walk, gradient, tap, block); break;
                    case 2: dot_product_block<T, block_channels, block_taps, 2>(walk, gradient, tap, block); break;
                    case 3: dot_product_block<T, block_channels, block_taps, 3>(walk, gradient, tap, block); break;
                    case 4: dot_product_block<T, block_channels, block_taps, 4>(walk, gradient, tap, block); break;
                    default: dot_product_block<T, block_channels, block_taps, 0>(walk, gradient, tap, block);
                    }
                }
            }
        }
    }
    for (std::size_t co = 0; co < channels; ++co) {
        for (std::size_t q = 0; q < taps; ++q) {
            const simd<T>& sum = sums[((co / block_channels) * tap_blocks + q / block_taps) * block_sums +
                                      (co % block_channels) * block_taps + q % block_taps];
            grad_weights[co * taps + q] += lane_sum(sum);
        }
    }
#else
    (void)shape, (void)input, (void)grad_y, (void)grad_weights, (void)scratch;
#endif
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

struct correlation_weights_tag {};
struct correlation_staging_tag {};

// A correlation read in place: for every image n, result channel c <
// channels and wide pixel j < wide_pixels,
//   result(n, c, j) = sum over taps t < taps of weights[c * taps + t]
//                     * source[n * image_stride + offsets[t] + j].
// Each tile of results goes to store(image, c0, rows, j0, columns, tile,
// tile_stride): result channels [c0, c0 + rows) and wide pixels [j0, j0 +
// columns), channel r's values at tile + r * tile_stride. Source must stay
// readable simd_width - 1 elements past the last pixel it is asked for.
//
// The GEMM micro-kernel computes it: the weights packed as Rows-row
// slivers, the pixels along the vectors (Vectors of them per tile), read
// unaligned from the source.
//
// correlation_tiles computes Count such correlations of one source side by
// side, each with its own taps, offsets and packed weights: their tiles of
// the same pixels go to the store together (tiles[k] for correlation k).
template <class T>
struct packed_correlation {
    const std::size_t* offsets;
    std::size_t taps;
    const T* packed; // Rows-row slivers of taps values each (pack_slivers)
};

// One tile of a correlation (micro_kernel_for_columns), called out of line:
// with 16 vector registers (AVX2), inlined into correlation_tiles among the
// values of its store, g++ 12 kept 3 of the tile's 12 accumulators on the
// stack through the loop over taps, and the 3x3 stride-2 input gradient ran
// 1.7 times slower (-mavx2 -mfma, kernels alone). With 32 registers it stays
// inlined.
template <class T, std::size_t Rows, std::size_t Vectors>
[[gnu::noinline]] void correlation_tile(std::size_t columns, std::size_t taps, const T* packed,
                                        const offset_rows<T>& rows, T* tile)
{
    micro_kernel_for_columns<T, Rows, Vectors>(columns, taps, packed, rows, tile);
}

template <class T, std::size_t Rows, std::size_t Vectors, std::size_t Count, class Store>
void correlation_tiles(std::size_t images, const T* source, std::size_t image_stride,
                       const std::array<packed_correlation<T>, Count>& correlations, std::size_t channels,
                       std::size_t wide_pixels, Store&& store)
{
    constexpr std::size_t columns_per_tile = Vectors * simd_width<T>;
    alignas(buffer_alignment) T tiles[Count][Rows * columns_per_tile];
    for (std::size_t image = 0; image < images; ++image) {
        const T* image_source = source + image * image_stride;
        for (std::size_t j = 0; j < wide_pixels; j += columns_per_tile) {
            const std::size_t columns = std::min(columns_per_tile, wide_pixels - j);
            for (std::size_t c0 = 0; c0 < channels; c0 += Rows) {
                for (std::size_t k = 0; k < Count; ++k) {
                    const packed_correlation<T>& correlation = correlations[k];
                    if constexpr (gemm_blocking<T>::wide_register_file) {
                        micro_kernel_for_columns<T, Rows, Vectors>(
                            columns, correlation.taps, correlation.packed + c0 * correlation.taps,
                            offset_rows<T>{image_source + j, correlation.offsets}, tiles[k]);
                    } else {
                        correlation_tile<T, Rows, Vectors>(
                            columns, correlation.taps, correlation.packed + c0 * correlation.taps,
                            offset_rows<T>{image_source + j, correlation.offsets}, tiles[k]);
                    }
                }
                store(image, c0, std::min(Rows, channels - c0), j, columns, tiles, columns_per_tile);
            }
        }
    }
}

template <class T, std::size_t Rows, std::size_t Vectors, class Store>
void direct_correlation_tiles(std::size_t images, const T* source, std::size_t image_stride, const std::size_t* offsets,
                              std::size_t taps, const T* weights, std::size_t channels, std::size_t wide_pixels,
                              Store&& store, scratch_source& scratch)
{
    T* packed = scratch.take<correlation_weights_tag, T>((channels + Rows - 1) / Rows * Rows * taps);
    pack_slivers<Rows>(weights, taps, 1, channels, taps, packed);
    correlation_tiles<T, Rows, Vectors, 1>(
        images, source, image_stride, std::array{packed_correlation<T>{offsets, taps, packed}}, channels, wide_pixels,
        [&](std::size_t image, std::size_t c0, std::size_t rows, std::size_t j0, std::size_t columns, const auto& tiles,
            std::size_t tile_stride) {
            store(image, c0, rows, j0, columns, static_cast<const T*>(tiles[0]), tile_stride);
        });
}

// The tile is the GEMM's (8 rows x 3 vectors on AVX-512), except for the
// small images of a network's last stages, whose wide pixels fit in four
// vectors: there 6 rows x 4 vectors cover an image in one tile, where 8 x 3
// would run a full tile and a one-vector tile of a third of its speed.
// (Result channels along the vectors instead, with each tap value
// broadcast, measured 3 to 45% slower on the reference network's
// convolutions; bench/RESULTS.md.)
template <class T>
constexpr bool uses_four_vector_tile(std::size_t wide_pixels)
{
    constexpr std::size_t width = simd_width<T>;
    if constexpr (gemm_blocking<T>::wide_register_file) {
        const std::size_t last_vectors = (wide_pixels % (3 * width) + width - 1) / width;
        return wide_pixels <= 4 * width && last_vectors == 1;
    } else {
        return false;
    }
}

// The packed weights of direct_correlation: slivers of the tile's rows.
template <class T>
constexpr std::size_t correlation_weights_count(std::size_t channels, std::size_t taps, std::size_t wide_pixels)
{
    const std::size_t rows = uses_four_vector_tile<T>(wide_pixels) ? 6 : gemm_blocking<T>::mr;
    return (channels + rows - 1) / rows * rows * taps;
}

template <class T, class Store>
void direct_correlation(std::size_t images, const T* source, std::size_t image_stride, const std::size_t* offsets,
                        std::size_t taps, const T* weights, std::size_t channels, std::size_t wide_pixels,
                        Store&& store, scratch_source& scratch)
{
    using blocking = gemm_blocking<T>;
    if constexpr (blocking::wide_register_file) {
        if (uses_four_vector_tile<T>(wide_pixels)) {
            direct_correlation_tiles<T, 6, 4>(images, source, image_stride, offsets, taps, weights, channels,
                                              wide_pixels, store, scratch);
            return;
        }
    }
    direct_correlation_tiles<T, blocking::mr, blocking::vectors_per_row>(
        images, source, image_stride, offsets, taps, weights, channels, wide_pixels, store, scratch);
}

// Correlations whose output rows are close to whole vectors (the stem's, a
// 1x1 or 3x3 stride-2 downsampling's at 28x28) need not move the tiles of
// direct_correlation, which go to a buffer and from there, row piece by row
// piece, to the output (for few taps that costs more than multiplying). Here a block
// of Rows result channels times OutRows output rows of Vectors vectors each
// stays in registers and is stored to planes laid out as the output's, the
// last vector of a row through a mask (correlation_by_row_blocks then stores
// an image's planes to the output in one run). Output row r of an image reads
// tap t's values at source + offsets[t] + r * row_stride, a vector per
// simd_width pixels.
// On AVX-512 a block is 4 channels (the gemm tile's 8 gave a stem's rows of
// two vectors one output row a block, 16 accumulators, 10 loads for 16
// multiply-adds; 4 channels take three rows, 24 accumulators, 10 loads for
// 24): on a Zen 5 core the stem's forward 1.17x, 3 -> 32 channels at 32x32
// 1.09x, 4 -> 4 at 28x28 1.63x, alone (bench/RESULTS.md).
template <class T>
struct row_blocking {
    static constexpr std::size_t accumulators = gemm_blocking<T>::wide_register_file ? 24 : 12;
    static constexpr std::size_t rows = gemm_blocking<T>::wide_register_file ? 4 : gemm_blocking<T>::mr;
    // Output rows per block for rows of `vectors` vectors: as many as fill
    // the accumulators, at least one.
    static constexpr std::size_t out_rows_for(std::size_t vectors)
    {
        return std::max<std::size_t>(1, accumulators / (rows * vectors));
    }
};

// Whether forward_accumulate takes the row blocks: rows of at most four
// vectors, at least three quarters used. There the blocks use the lanes as
// well as the tiles do (a tile's wide rows are a phase plane's, a pixel or
// two longer than an output row) and skip the tiles' piece-by-piece stores.
// First taken for few taps only (the stem, 1x1 kernels); on a Zen 5 core the
// 3x3 stride-2 forward at 28x28 (144 taps) then ran 1.07 to 1.11 times
// faster in this form, and 3x3 stride-1 shapes too narrow for Winograd's
// form (3 to 5 channels) as fast or faster (kernels alone, batch 64).
template <class T>
constexpr bool uses_row_blocks(const convolution_shape& shape)
{
    constexpr std::size_t width = simd_width<T>;
    const std::size_t out_width = shape.out_width();
    const std::size_t vectors = (out_width + width - 1) / width;
    return vectors <= 4 && 4 * out_width >= 3 * vectors * width;
}

// The block of Rows result channels (a packed sliver of taps x Rows weights)
// and OutRows output rows of Vectors vectors at source (tap t of output row
// r at source + offsets[t] + r * row_stride), stored to out (result channel
// i's row r at out + i * channel_stride + r * out_width) for the first
// `channels` channels and out_width pixels of each row (what out held is
// overwritten).
template <class T, std::size_t Rows, std::size_t OutRows, std::size_t Vectors>
void correlation_row_block(std::size_t taps, const T* __restrict sliver, const T* source, const std::size_t* offsets,
                           std::size_t row_stride, T* out, std::size_t channel_stride, std::size_t out_width,
                           std::size_t channels)
{
    using vector = simd<T>;
    constexpr std::size_t width = vector::size;
    constexpr std::size_t lanes = OutRows * Vectors;
    vector accumulator[Rows][lanes];
    PETRA_UNROLL(16)
    for (std::size_t i = 0; i < Rows; ++i) {
        PETRA_UNROLL(8)
        for (std::size_t k = 0; k < lanes; ++k) accumulator[i][k] = vector(T(0));
    }
    for (std::size_t t = 0; t < taps; ++t) {
        const T* tap = source + offsets[t];
        vector values[lanes];
        PETRA_UNROLL(8)
        for (std::size_t k = 0; k < lanes; ++k) {
            values[k] = vector::load_unaligned(tap + (k / Vectors) * row_stride + (k % Vectors) * width);
        }
        PETRA_UNROLL(16)
        for (std::size_t i = 0; i < Rows; ++i) {
            const vector weight(sliver[i]);
            PETRA_UNROLL(8)
            for (std::size_t k = 0; k < lanes; ++k)
                accumulator[i][k] = fused_multiply_add(weight, values[k], accumulator[i][k]);
        }
        sliver += Rows;
    }
    // Unrolled over every row, each stored if it is one of the block's
    // channels: the accumulators go out from their registers (a loop to the
    // run-time count indexed them, and they were stored to the stack first).
    const std::size_t last = out_width - (Vectors - 1) * width;
    PETRA_UNROLL(16)
    for (std::size_t i = 0; i < Rows; ++i) {
        if (i >= channels) break;
        PETRA_UNROLL(8)
        for (std::size_t k = 0; k < lanes; ++k) {
            T* at = out + i * channel_stride + (k / Vectors) * out_width + (k % Vectors) * width;
            store_vector(accumulator[i][k], k % Vectors + 1 < Vectors ? width : last, at, T(0));
        }
    }
}

// Values of correlation_by_row_blocks' staged planes: one image's block of
// channels.
template <class T>
constexpr std::size_t row_block_staging_count(const convolution_shape& shape)
{
    return row_blocking<T>::rows * shape.output_pixels();
}

// forward_accumulate's row blocks over every image, Vectors vectors per row.
// Kept out of forward_accumulate: inlined there, g++ 12 -O2 spilled the
// block's loaded values to the stack inside its loop over taps, and the
// stem's forward (one channel, 9 taps) ran 1.3 to 1.5 times slower (Zen 5,
// kernel alone, batch 64); at -O3 (the project's Release builds) out of line
// measured 1.15 times faster in bench_kernels, within a noisy host's spread.
//
// An image's block of channels is computed into `staged` (rows output
// planes, in the core's caches) and then stored to the output in one run of
// whole vectors, since its planes are consecutive there. Stored piece of
// rows by piece of rows instead, each piece beginning and ending inside a
// cache line, an output the caches do not hold (a training step's) took
// twice the time it takes alone: in a step on a Zen 5 core the stem's
// forward and the 1x1 stride-2 forward at 28x28 ran 1.20 times faster
// staged (two runs of 15 alternated rounds; a third, on a host far noisier,
// 0.96-0.97x), the 3x3 stride-2 forward 0.99-1.01x. The same values, so the
// same bits: store_row applies beta as store_vector does.
template <class T, std::size_t Vectors>
[[gnu::noinline]] void correlation_by_row_blocks(const convolution_shape& shape, const phased_input<T>& phased,
                                                 const std::size_t* offsets, const T* packed, T* staged, T* output,
                                                 T beta)
{
    constexpr std::size_t rows = row_blocking<T>::rows;
    constexpr std::size_t out_rows = row_blocking<T>::out_rows_for(Vectors);
    const std::size_t taps = shape.patch_size(), channels = shape.out_channels;
    const std::size_t out_height = shape.out_height(), out_width = shape.out_width(), pixels = shape.output_pixels();
    const std::size_t whole_blocks_end = out_height - out_height % out_rows;
    for (std::size_t image = 0; image < shape.batch; ++image) {
        const T* image_source = phased.data + image * phased.image_stride();
        for (std::size_t c0 = 0; c0 < channels; c0 += rows) {
            const T* sliver = packed + c0 * taps;
            const std::size_t count = std::min(rows, channels - c0);
            std::size_t r = 0;
            for (; r < whole_blocks_end; r += out_rows) {
                correlation_row_block<T, rows, out_rows, Vectors>(taps, sliver, image_source + r * phased.width,
                                                                  offsets, phased.width, staged + r * out_width, pixels,
                                                                  out_width, count);
            }
            // The last rows one at a time: a block reads whole blocks of
            // rows, and past the image's last row lies the next plane or the
            // end of the buffer. (Their own block of two or more rows
            // measured slower: the 3x3 stride-2 forward at 28x28 1.5 times.)
            for (; r < out_height; ++r) {
                correlation_row_block<T, rows, 1, Vectors>(taps, sliver, image_source + r * phased.width, offsets,
                                                           phased.width, staged + r * out_width, pixels, out_width,
                                                           count);
            }
            store_row(count * pixels, staged, output + (image * channels + c0) * pixels, beta);
        }
    }
}

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
void forward_accumulate_images(const convolution_shape& shape, const T* input, const T* weights, T* output, T beta,
                               scratch_source& scratch)
{
    const phased_input<T> phased = prepare_input(shape, input, scratch);
    const std::size_t taps = shape.patch_size(), channels = shape.out_channels;
    std::size_t* offsets = scratch.take<tap_offsets_tag, std::size_t>(taps);
    for (std::size_t q = 0; q < taps; ++q) {
        offsets[q] = static_cast<std::size_t>(phased.tap_origin(tap_of(shape, q)) - phased.data);
    }
    if (uses_row_blocks<T>(shape)) {
        constexpr std::size_t rows = row_blocking<T>::rows;
        T* packed = scratch.take<correlation_weights_tag, T>((channels + rows - 1) / rows * rows * taps);
        pack_slivers<rows>(weights, taps, 1, channels, taps, packed);
        T* staged = scratch.take<correlation_staging_tag, T>(row_block_staging_count<T>(shape));
        const std::size_t vectors = (shape.out_width() + simd_width<T> - 1) / simd_width<T>;
        ([&]<std::size_t... Index>(std::index_sequence<Index...>) {
            ((vectors == Index + 1
                  ? correlation_by_row_blocks<T, Index + 1>(shape, phased, offsets, packed, staged, output, beta)
                  : void()),
             ...);
        })(std::make_index_sequence<4>{});
        return;
    }
    const std::size_t out_width = shape.out_width(), pixels = shape.output_pixels();
    // Where a phase plane's rows are as wide as the output's (a 1x1 kernel
    // without padding), wide pixel j is output pixel j: a
    // tile's row goes out whole, not row piece by row piece.
    const bool wide_rows_are_output_rows = phased.width == out_width;
    direct_correlation(
        shape.batch, phased.data, phased.image_stride(), offsets, taps, weights, channels,
        shape.out_height() * phased.width,
        [&](std::size_t image, std::size_t c0, std::size_t rows, std::size_t j0, std::size_t columns, const T* tile,
            std::size_t tile_stride) {
            if (wide_rows_are_output_rows) {
                for (std::size_t r = 0; r < rows; ++r) {
                    store_row(columns, tile + r * tile_stride, output + (image * channels + c0 + r) * pixels + j0,
                              beta);
                }
                return;
            }
            for_each_wide_row(
                phased.width, j0, columns,
                [&](std::size_t row, std::size_t column, std::size_t length, std::size_t offset) {
                    if (column >= out_width) return;
                    length = std::min(length, out_width - column);
                    for (std::size_t r = 0; r < rows; ++r) {
                        store_row(length, tile + r * tile_stride + offset,
                                  output + ((image * channels + c0 + r) * pixels + row * out_width + column), beta);
                    }
                });
        },
        scratch);
}

// The images forward_accumulate takes at a time (chunk_images): those
// whose phased input fits the budget.
template <class T>
constexpr std::size_t forward_chunk_images(const convolution_shape& shape)
{
    return chunk_images(shape.batch, phased_input_count<T>(with_batch(shape, 1)) * sizeof(T));
}

// forward_accumulate_images over chunks of the batch (see chunk_images); a
// 1x1 kernel with stride 2, and a 3x3 one with stride 2 where
// uses_patch_products, as matrix products instead (pointwise.hpp): the same
// values.
template <class T>
void forward_accumulate(const convolution_shape& shape, const T* input, const T* weights, T* output, T beta,
                        scratch_source& scratch)
{
    if (uses_pointwise_products(shape)) {
        pointwise_forward(pointwise_geometry_of(shape), shape.batch, input, weights, output, beta, scratch);
        return;
    }
#if defined(__AVX512F__)
    if constexpr (std::is_same_v<T, float>) {
        if (uses_patch_products<T>(shape)) {
            patch_forward(patch_geometry_of(shape), shape.batch, input, weights, output, beta, scratch);
            return;
        }
    }
#endif
    for_each_chunk(shape, forward_chunk_images<T>(shape), scratch,
                   [&](const convolution_shape& part, std::size_t in, std::size_t out, scratch_source& chunk_scratch) {
                       forward_accumulate_images(part, input + in, weights, output + out, beta, chunk_scratch);
                   });
}

// y = convolution(x, weights) and the batch statistics of y's channels
// (at most channel_chunk of them), the same bits as forward_accumulate and
// then channel_mean_variance over y: the batch is taken in
// channel_mean_variance's groups of images, each group's output computed
// and then added to the statistics while it is in the core's caches, where
// channel_mean_variance after the whole forward read the output again from
// beyond them (6.4 MB for the reference network's stem).
template <class T>
void forward_with_statistics(const convolution_shape& shape, const T* x, const T* weights, T* y,
                             scratch_source& scratch, channel_statistics<T> statistics)
{
    const std::size_t pixels = shape.output_pixels(), channels = shape.out_channels;
    const std::size_t in_values = shape.in_channels * shape.input_pixels(), out_values = channels * pixels;
    mean_variance_groups<T> groups(shape.batch, channels, pixels, 0, channels, mean_variance_group_bytes());
    for (std::size_t first = 0; first < shape.batch; first += groups.group()) {
        const std::size_t images = std::min(groups.group(), shape.batch - first);
        scratch_source group_scratch = scratch;
        forward_accumulate(with_batch(shape, images), x + first * in_values, weights, y + first * out_values, T(0),
                           group_scratch);
        groups.add(first, images, y + first * out_values);
    }
    groups.finish(statistics.mean, statistics.variance);
}

struct phase_source_tag {};
struct phase_weights_tag {};

// The rows and columns backward_input_by_phases works on (see there). Phase
// rows r whose input row stride * r + a - padding lies in [0, height) form
// [first_index(a), end_index(a, height)), and likewise for columns; all
// phases together need rows [first_row, end_row) and columns [first_column,
// end_column). The copy of grad_y has `border` zero rows and columns in
// front for the taps u, v <= border, so that result row r reads copy row
// r - first_row + border - u; its planes are source_width wide and
// source_plane values large.
struct input_gradient_geometry {
    std::size_t stride, kernel, padding;
    std::size_t phases;
    std::size_t first_row, end_row, first_column, end_column;
    std::size_t border;
    std::size_t source_width, source_plane;
    // Taps of one phase at most, over all output channels.
    std::size_t max_taps;

    constexpr explicit input_gradient_geometry(const convolution_shape& shape)
        : stride(shape.stride), kernel(shape.kernel), padding(shape.padding), phases(std::min(stride, kernel)),
          first_row(first_index(phases - 1)), end_row(end_index(0, shape.in_height)),
          first_column(first_index(phases - 1)), end_column(end_index(0, shape.in_width)),
          border((kernel + stride - 1) / stride - 1), source_width(end_column - first_column + border),
          source_plane((end_row - first_row + border) * source_width),
          max_taps(shape.out_channels * (border + 1) * (border + 1))
    {}

    constexpr std::size_t first_index(std::size_t phase) const
    {
        return padding > phase ? (padding - phase + stride - 1) / stride : std::size_t(0);
    }
    constexpr std::size_t end_index(std::size_t phase, std::size_t extent) const
    {
        return (extent + padding - phase + stride - 1) / stride;
    }
    // Taps u (rows) or v (columns) of phase a along one axis.
    constexpr std::size_t phase_taps(std::size_t a) const { return (kernel - a + stride - 1) / stride; }
    // Values of the copy of grad_y, with its slack.
    template <class T>
    constexpr std::size_t source_count(const convolution_shape& shape) const
    {
        return shape.batch * shape.out_channels * source_plane + 2 * simd_width<T>;
    }
};

// Whether the input gradient computes the two column phases of a result row
// together (backward_input_by_phases): a 3x3 kernel with stride 2 and
// padding 1 on an image of even width, where the phases' columns pair up
// into whole rows (x = 2 c from phase 1, x = 2 c + 1 from phase 0) that are
// stored once, in whole vectors, instead of every other value of a row in
// each of two passes over the batch.
constexpr bool pairs_phase_columns(const convolution_shape& shape)
{
    return shape.kernel == 3 && shape.stride == 2 && shape.padding == 1 && shape.in_width % 2 == 0;
}

// grad_x = input gradient of the convolution + beta * grad_x, for a
// validated shape with a non-empty batch (grad_x not read when beta == 0).
//
// Input positions are split into the stride x stride phases of the padded
// input: padded position (y, x) = (stride * r + a, stride * c + b) is reached
// only through taps kh = a + stride * u, kw = b + stride * v, from output pixel
// (r - u, c - v). So phase (a, b) of the input gradient is a stride-1
// correlation of the output gradient with those taps, flipped:
//   grad(stride r + a, stride c + b) = sum over co, u, v of
//       weights[co][ci][a + stride u][b + stride v] * grad_y[co][r - u][c - v],
// which direct_correlation computes in place from a copy of grad_y with
// `border` zero rows and columns in front. With stride 1 this is the classic
// convolution with transposed, flipped weights. Only phase rows that land
// inside the image are computed.
//
// A 1x1 kernel with stride 2 never comes here (pointwise.hpp takes it).
template <class T>
void backward_input_by_phases_images(const convolution_shape& shape, const T* grad_y, const T* weights, T* grad_x,
                                     T beta, scratch_source& scratch)
{
    const std::size_t stride = shape.stride, kernel = shape.kernel, padding = shape.padding;
    const std::size_t in_channels = shape.in_channels, out_channels = shape.out_channels;
    const std::size_t height = shape.in_height, width = shape.in_width;
    const input_gradient_geometry geometry(shape);
    const auto first_index = [&](std::size_t phase) { return geometry.first_index(phase); };
    const auto end_index = [&](std::size_t phase, std::size_t extent) { return geometry.end_index(phase, extent); };
    const std::size_t first_row = geometry.first_row, first_column = geometry.first_column;
    const std::size_t border = geometry.border, source_width = geometry.source_width;
    const std::size_t source_plane = geometry.source_plane;
    const std::size_t out_height = shape.out_height(), out_width = shape.out_width();
    T* copy = scratch.take<phase_source_tag, T>(geometry.source_count<T>(shape));
    const T* source = copy;
    // Output pixel (oh, ow) lands at copy row oh + border - first_row and
    // column ow + border - first_column. These are never negative:
    // first_row and first_column are at most ceil((padding - stride + 1)
    // / stride), which padding < kernel keeps within border. Everything
    // else is zero, written in the same pass.
    const std::size_t row_shift = border - first_row, column_shift = border - first_column;
    const std::size_t copy_rows = source_plane / source_width;
    const std::size_t copied_end = std::min(source_width, column_shift + out_width);
    const auto copy_rows_of_planes = [&](auto&& copy_row, auto&& zero_row) {
        for (std::size_t plane = 0; plane < shape.batch * out_channels; ++plane) {
            for (std::size_t row = 0; row < copy_rows; ++row) {
                T* target = copy + plane * source_plane + row * source_width;
                if (row < row_shift || row - row_shift >= out_height) {
                    zero_row(target);
                } else {
                    copy_row(grad_y + (plane * out_height + row - row_shift) * out_width, target);
                }
            }
        }
    };
    bool copied = false;
#if defined(__AVX512F__)
    if constexpr (std::is_same_v<T, float>) {
        if (padded_row_gather::fits(source_width, out_width)) {
            // Each row written whole in one masked store, its zeros with it.
            const padded_row_gather shifted(source_width, 1, -static_cast<std::ptrdiff_t>(column_shift), out_width);
            copy_rows_of_planes(shifted, [&](T* target) { shifted.zero(target); });
            copied = true;
        }
    }
#endif
    if (!copied) {
        copy_rows_of_planes(
            [&](const T* row, T* target) {
                std::fill(target, target + column_shift, T(0));
                std::memcpy(target + column_shift, row, (copied_end - column_shift) * sizeof(T));
                std::fill(target + copied_end, target + source_width, T(0));
            },
            [&](T* target) { std::fill(target, target + source_width, T(0)); });
    }
    std::fill(copy + shape.batch * out_channels * source_plane,
              copy + shape.batch * out_channels * source_plane + 2 * simd_width<T>, T(0));
    const std::size_t max_taps = geometry.max_taps;
    const std::size_t correlations = pairs_phase_columns(shape) ? 2 : 1;
    T* matrices = scratch.take<phase_weights_tag, T>(correlations * in_channels * max_taps);
    std::size_t* all_offsets = scratch.take<tap_offsets_tag, std::size_t>(correlations * max_taps);
    // Phase (a, b)'s weights as an in_channels x taps matrix, and the copy
    // offset of each tap, `shift` columns further: returns the taps.
    const auto phase_matrix = [&](std::size_t a, std::size_t b, std::size_t shift, T* matrix, std::size_t* offsets) {
        const std::size_t taps_u = geometry.phase_taps(a), taps_v = geometry.phase_taps(b);
        // Tap (u, v) reads copy row (result row - first_row) + border - u.
        for (std::size_t co = 0; co < out_channels; ++co) {
            for (std::size_t u = 0; u < taps_u; ++u) {
                for (std::size_t v = 0; v < taps_v; ++v) {
                    offsets[(co * taps_u + u) * taps_v + v] =
                        co * source_plane + (border - u) * source_width + (border - v) + shift;
                }
            }
        }
        return gather_phase_weights(weights, out_channels, in_channels, kernel, stride, a, b, taps_u, taps_v, matrix);
    };
    for (std::size_t a = 0; a < geometry.phases; ++a) {
        const std::size_t phase_first_row = first_index(a), phase_end_row = end_index(a, height);
        if (phase_first_row >= phase_end_row) continue;
        const T* phase_source = source + (phase_first_row - first_row) * source_width;
        const std::size_t wide_pixels = (phase_end_row - phase_first_row) * source_width;
        if (correlations == 2) {
            // Both column phases of result row y at once (see
            // pairs_phase_columns): phase 1's column c is x = 2 c and phase
            // 0's column c + 1 is x = 2 c + 1, so phase 0 reads one column
            // further and the two tiles' columns interleave into the row.
            const std::size_t taps_even = phase_matrix(a, 1, 0, matrices, all_offsets);
            const std::size_t taps_odd =
                phase_matrix(a, 0, 1, matrices + in_channels * max_taps, all_offsets + max_taps);
            const std::size_t* offsets_odd = all_offsets + max_taps;
            const std::size_t half_width = width / 2;
            const auto paired = [&]<std::size_t Rows, std::size_t Vectors>() {
                const std::size_t sliver_rows = (in_channels + Rows - 1) / Rows * Rows;
                T* packed = scratch.take<correlation_weights_tag, T>(sliver_rows * (taps_even + taps_odd));
                pack_slivers<Rows>(matrices, taps_even, 1, in_channels, taps_even, packed);
                pack_slivers<Rows>(matrices + in_channels * max_taps, taps_odd, 1, in_channels, taps_odd,
                                   packed + sliver_rows * taps_even);
                correlation_tiles<T, Rows, Vectors, 2>(
                    shape.batch, phase_source, out_channels * source_plane,
                    std::array{packed_correlation<T>{all_offsets, taps_even, packed},
                               packed_correlation<T>{offsets_odd, taps_odd, packed + sliver_rows * taps_even}},
                    in_channels, wide_pixels,
                    [&](std::size_t image, std::size_t c0, std::size_t rows, std::size_t j0, std::size_t columns,
                        const auto& tiles, std::size_t tile_stride) {
                        for_each_wide_row(
                            source_width, j0, columns,
                            [&](std::size_t row, std::size_t column, std::size_t length, std::size_t offset) {
                                if (column >= half_width) return;
                                const std::size_t count = std::min(length, half_width - column);
                                const std::size_t y = (phase_first_row + row) * 2 + a - 1;
                                for (std::size_t r = 0; r < rows; ++r) {
                                    store_row_interleaved(
                                        count, static_cast<const T*>(tiles[0] + r * tile_stride + offset),
                                        static_cast<const T*>(tiles[1] + r * tile_stride + offset),
                                        grad_x + ((image * in_channels + c0 + r) * height + y) * width + 2 * column,
                                        beta);
                                }
                            });
                    });
            };
            if (uses_four_vector_tile<T>(wide_pixels)) {
                paired.template operator()<6, 4>();
            } else {
                paired.template operator()<gemm_blocking<T>::mr, gemm_blocking<T>::vectors_per_row>();
            }
            continue;
        }
        for (std::size_t b = 0; b < geometry.phases; ++b) {
            const std::size_t taps = phase_matrix(a, b, 0, matrices, all_offsets);
            // Wide pixel (row, column) of this phase is result row
            // phase_first_row + row, result column first_column + column.
            direct_correlation(
                shape.batch, phase_source, out_channels * source_plane, static_cast<const std::size_t*>(all_offsets),
                taps, static_cast<const T*>(matrices), in_channels, wide_pixels,
                [&](std::size_t image, std::size_t c0, std::size_t rows, std::size_t j0, std::size_t columns,
                    const T* tile, std::size_t tile_stride) {
                    for_each_wide_row(
                        source_width, j0, columns,
                        [&](std::size_t row, std::size_t column, std::size_t length, std::size_t offset) {
                            const std::size_t y = (phase_first_row + row) * stride + a - padding;
                            const std::ptrdiff_t origin =
                                static_cast<std::ptrdiff_t>((first_column + column) * stride + b) -
                                static_cast<std::ptrdiff_t>(padding);
                            const tap_range valid = valid_taps(origin, stride, length, width);
                            if (valid.begin == valid.end) return;
                            const std::size_t count = valid.end - valid.begin;
                            const std::size_t x =
                                static_cast<std::size_t>(origin + static_cast<std::ptrdiff_t>(valid.begin * stride));
                            for (std::size_t r = 0; r < rows; ++r) {
                                T* out = grad_x + ((image * in_channels + c0 + r) * height + y) * width + x;
                                const T* in = tile + r * tile_stride + offset + valid.begin;
                                if (stride == 1) {
                                    store_row(count, in, out, beta);
                                } else {
                                    store_row_stride_two(count, in, out, beta);
                                }
                            }
                        });
                },
                scratch);
        }
    }
}

// The images backward_input_by_phases takes at a time (chunk_images):
// those whose copy of the output gradient fits the budget.
template <class T>
constexpr std::size_t input_gradient_chunk_images(const convolution_shape& shape)
{
    const convolution_shape image = with_batch(shape, 1);
    return chunk_images(shape.batch, input_gradient_geometry(image).source_count<T>(image) * sizeof(T));
}

// backward_input_by_phases_images over chunks of the batch (see
// chunk_images); a 1x1 kernel with stride 2 as matrix products instead
// (pointwise.hpp).
template <class T>
void backward_input_by_phases(const convolution_shape& shape, const T* grad_y, const T* weights, T* grad_x, T beta,
                              scratch_source& scratch)
{
    if (uses_pointwise_products(shape)) {
        pointwise_backward_input(pointwise_geometry_of(shape), shape.batch, grad_y, weights, grad_x, beta, scratch);
        return;
    }
#if defined(__AVX512F__)
    if constexpr (std::is_same_v<T, float>) {
        if (uses_patch_input_gradient<T>(shape)) {
            patch_backward_input(patch_geometry_of(shape), shape.batch, patch_group_images<T>(shape), grad_y, weights,
                                 grad_x, beta, scratch);
            return;
        }
    }
#endif
    // The forward's output is this gradient's source, its input the result.
    for_each_chunk(shape, input_gradient_chunk_images<T>(shape), scratch,
                   [&](const convolution_shape& part, std::size_t in, std::size_t out, scratch_source& chunk_scratch) {
                       backward_input_by_phases_images(part, grad_y + out, weights, grad_x + in, beta, chunk_scratch);
                   });
}

// Whether the forward pass and both gradients of a shape take Winograd's
// form (winograd.hpp; F(4x4, 3x3) or F(2x2, 3x3), winograd_output_tile)
// instead of the direct correlation: 3x3 kernels with stride 1 and padding
// 1, between at least 8 channels on every side, whose input channels fill
// more than half of the float vectors they take. Winograd's form keeps
// channels along the vectors, padded to whole vectors through its
// transforms and products, where the direct form keeps pixels along them:
// on a Zen 5 core (16 floats a vector) the direct form ran the three passes
// of 8 input channels together 1.02 to 1.95 times as fast as Winograd's
// (8 -> 8 channels at 7x7 to 56x56; 8 -> 12, 16 and 24 at 28x28), those of
// 16 and 24 input channels 0.51 to 1.02 times, those of 12 0.79 to 1.20
// times (12 -> 8 and 12 -> 12 about even, 12 -> 16 and 12 -> 24 faster in
// Winograd's form); bench/RESULTS.md. (A stem reading one or three
// channels gains nothing from Winograd's form either.) It does 16
// multiplications per 2x2 results and channel pair where the direct form
// does 36 (F(4x4, 3x3): 36 per 4x4), with values rounded differently: the
// results agree with the direct form to the accumulation's rounding
// (tests/kernels/test_convolution.cpp).
constexpr bool winograd_applies(const convolution_shape& shape)
{
    // The input channels as the form pads them (its source_stride).
    const std::size_t padded_input_channels = winograd_geometry<float>::round_up(shape.in_channels);
    return shape.kernel == 3 && shape.stride == 1 && shape.padding == 1 && shape.in_channels >= 8 &&
           shape.out_channels >= 8 && padded_input_channels < 2 * shape.in_channels;
}

// The forward pass reads the input's channels and makes the output's; the
// input gradient the other way round.
// output_tile: 2 for F(2x2, 3x3), 4 for F(4x4, 3x3) (winograd.hpp); the
// weight gradient takes the forward pass's geometry.
template <class T>
constexpr winograd_geometry<T> forward_winograd_geometry(const convolution_shape& shape, std::size_t output_tile = 2)
{
    return {shape.batch, shape.in_height, shape.in_width, shape.in_channels, shape.out_channels, output_tile};
}

template <class T>
constexpr winograd_geometry<T> input_gradient_winograd_geometry(const convolution_shape& shape,
                                                                std::size_t output_tile = 2)
{
    return {shape.batch, shape.in_height, shape.in_width, shape.out_channels, shape.in_channels, output_tile};
}

// The tile of the forward pass, the input gradient and the weight gradient:
// F(4x4, 3x3) where it takes fewer products per image than F(2x2, 3x3) (36
// per tile of 4x4 results against 16 per tile of 2x2, tiles past the edge
// included), F(2x2, 3x3) elsewhere. On a Zen 4 core F(4x4, 3x3) measured
// 1.17 to 1.41 times faster for the correlations on every shape of the
// reference network (28x28 to 7x7, 16 to 64 channels), on a Zen 5 core
// 1.11 to 1.33 times for the weight gradient (bench/RESULTS.md).
constexpr std::size_t winograd_output_tile(const convolution_shape& shape)
{
    const auto tiles = [&](std::size_t side) {
        return ((shape.in_height + side - 1) / side) * ((shape.in_width + side - 1) / side);
    };
    return 36 * tiles(4) < 16 * tiles(2) ? 4 : 2;
}

// output = convolution(input, weights) + beta * output through Winograd's
// form, for a shape winograd_applies to.
template <class T>
void winograd_forward(const convolution_shape& shape, const T* input, const T* weights, T* output, T beta,
                      scratch_source& scratch, affine_relu_map<T> input_map = {},
                      channel_statistics<T> output_statistics = {})
{
    const std::size_t in_channels = shape.in_channels;
    winograd_correlation(
        forward_winograd_geometry<T>(shape, winograd_output_tile(shape)), input,
        [&](std::size_t co, std::size_t ci, std::size_t kh, std::size_t kw) {
            return weights[((co * in_channels + ci) * 3 + kh) * 3 + kw];
        },
        output, beta, scratch, input_map, output_statistics);
}

// grad_x = input gradient + beta * grad_x through Winograd's form:
// the stride-1 correlation of grad_y with the weights flipped and their
// channel roles exchanged, for a shape winograd_applies to.
template <class T>
void winograd_backward_input(const convolution_shape& shape, const T* grad_y, const T* weights, T* grad_x, T beta,
                             scratch_source& scratch)
{
    const std::size_t in_channels = shape.in_channels;
    winograd_correlation(
        input_gradient_winograd_geometry<T>(shape, winograd_output_tile(shape)), grad_y,
        [&](std::size_t ci, std::size_t co, std::size_t kh, std::size_t kw) {
            return weights[((co * in_channels + ci) * 3 + 2 - kh) * 3 + 2 - kw];
        },
        grad_x, beta, scratch);
}

} // namespace detail

// Whether the three kernels of a shape run in Winograd's form
// (detail::winograd_applies): what a layer reports to the cost model.
constexpr bool convolution_uses_winograd(const convolution_shape& shape) { return detail::winograd_applies(shape); }

// Whether convolution_forward and convolution_backward_weights take an
// input map (input_map.hpp) for a shape: those in Winograd's form, which
// map the input as they gather it (the direct form copies it with memcpy
// and its stride-2 split; it takes none).
constexpr bool convolution_takes_input_map(const convolution_shape& shape) { return detail::winograd_applies(shape); }

namespace detail {

template <class T>
void require_input_map_shape(const convolution_shape& shape, affine_relu_map<T> input_map, const char* kernel)
{
    if (input_map && !convolution_takes_input_map(shape)) {
        raise_error(
            error_kind::invalid_argument,
            std::string("petra::kernels ") + kernel +
                ": an input map needs a 3x3 stride-1 shape with padding 1, at least 8 channels each way and input "
                "channels that fill more than half of their vectors (Winograd's form)");
    }
}

} // namespace detail

// The scratch each convolution kernel takes for a shape (scratch.hpp), from
// the counts the kernels take: nothing for an empty batch.
template <class T>
constexpr scratch_demand convolution_forward_scratch(const convolution_shape& shape)
{
    scratch_demand demand;
    if (shape.batch == 0) return demand;
    if (detail::winograd_applies(shape)) {
        detail::ask_winograd_scratch(
            demand, detail::forward_winograd_geometry<T>(shape, detail::winograd_output_tile(shape)), false);
        return demand;
    }
    if (detail::uses_pointwise_products(shape)) {
        return detail::pointwise_scratch<T>(detail::pointwise_geometry_of(shape), shape.out_channels,
                                            shape.in_channels);
    }
    if (detail::uses_patch_products<T>(shape))
        return detail::patch_forward_scratch<T>(detail::patch_geometry_of(shape));
    demand.template ask<detail::phased_input_tag, T>(
        detail::phased_input_count<T>(detail::with_batch(shape, detail::forward_chunk_images<T>(shape))));
    demand.template ask<detail::tap_offsets_tag, std::size_t>(shape.patch_size());
    const std::size_t wide_pixels = shape.out_height() * detail::phase_width(shape);
    constexpr std::size_t block_rows = detail::row_blocking<T>::rows;
    demand.template ask<detail::correlation_weights_tag, T>(
        detail::uses_row_blocks<T>(shape)
            ? (shape.out_channels + block_rows - 1) / block_rows * block_rows * shape.patch_size()
            : detail::correlation_weights_count<T>(shape.out_channels, shape.patch_size(), wide_pixels));
    if (detail::uses_row_blocks<T>(shape)) {
        demand.template ask<detail::correlation_staging_tag, T>(detail::row_block_staging_count<T>(shape));
    }
    return demand;
}

template <class T>
constexpr scratch_demand convolution_backward_input_scratch(const convolution_shape& shape)
{
    scratch_demand demand;
    if (shape.batch == 0) return demand;
    if (detail::winograd_applies(shape)) {
        detail::ask_winograd_scratch(
            demand, detail::input_gradient_winograd_geometry<T>(shape, detail::winograd_output_tile(shape)), true);
        return demand;
    }
    if (detail::uses_pointwise_products(shape)) {
        return detail::pointwise_scratch<T>(detail::pointwise_geometry_of(shape), shape.in_channels,
                                            shape.out_channels);
    }
    if (detail::uses_patch_input_gradient<T>(shape)) {
        return detail::patch_input_gradient_scratch<T>(detail::patch_geometry_of(shape),
                                                       detail::patch_group_images<T>(shape));
    }
    const detail::input_gradient_geometry geometry(shape);
    const bool paired = detail::pairs_phase_columns(shape);
    const std::size_t correlations = paired ? 2 : 1;
    demand.template ask<detail::phase_source_tag, T>(
        geometry.source_count<T>(detail::with_batch(shape, detail::input_gradient_chunk_images<T>(shape))));
    demand.template ask<detail::phase_weights_tag, T>(correlations * shape.in_channels * geometry.max_taps);
    demand.template ask<detail::tap_offsets_tag, std::size_t>(correlations * geometry.max_taps);
    for (std::size_t a = 0; a < geometry.phases; ++a) {
        const std::size_t first = geometry.first_index(a), end = geometry.end_index(a, shape.in_height);
        if (first >= end) continue;
        const std::size_t rows = end - first;
        if (paired) {
            // Both column phases' slivers in one buffer (the rows of the tile
            // direct_correlation would choose).
            const std::size_t taps =
                shape.out_channels * geometry.phase_taps(a) * (geometry.phase_taps(0) + geometry.phase_taps(1));
            demand.template ask<detail::correlation_weights_tag, T>(
                detail::correlation_weights_count<T>(shape.in_channels, taps, rows * geometry.source_width));
            continue;
        }
        for (std::size_t b = 0; b < geometry.phases; ++b) {
            const std::size_t taps = shape.out_channels * geometry.phase_taps(a) * geometry.phase_taps(b);
            demand.template ask<detail::correlation_weights_tag, T>(
                detail::correlation_weights_count<T>(shape.in_channels, taps, rows * geometry.source_width));
        }
    }
    return demand;
}

template <class T>
constexpr scratch_demand convolution_backward_weights_scratch(const convolution_shape& shape)
{
    scratch_demand demand;
    if (shape.batch == 0) return demand;
    if (detail::winograd_applies(shape)) {
        detail::ask_winograd_gradient_scratch(
            demand, detail::forward_winograd_geometry<T>(shape, detail::winograd_output_tile(shape)));
        return demand;
    }
    const std::size_t taps = shape.patch_size();
    if (detail::uses_dot_product_gradient<T>(shape)) {
        demand.template ask<detail::phased_input_tag, T>(detail::phased_input_count<T>(shape));
        using blocking = detail::dot_product_blocking<T>;
        demand.template ask<detail::dot_product_sums_tag, simd<T>>(
            (shape.out_channels + blocking::channels - 1) / blocking::channels *
            ((taps + blocking::taps - 1) / blocking::taps) * blocking::channels * blocking::taps);
        demand.template ask<detail::tap_offsets_tag, std::size_t>(taps);
        return demand;
    }
    const detail::weight_gradient_layout<T> layout(shape);
    const std::size_t chunk = detail::weight_gradient_chunk_images<T>(shape);
    if (!detail::weight_gradient_reads_in_place<T>(shape)) {
        demand.template ask<detail::phased_input_tag, T>(
            detail::phased_input_count<T>(detail::with_batch(shape, chunk)));
    }
    demand.template ask<detail::weight_gradient_outputs_tag, T>(chunk * layout.image_values);
    demand.template ask<detail::weight_gradient_taps_tag, const T*>(taps);
    demand.template ask<detail::image_tap_tag, const T*>(taps);
    demand.template ask<detail::weight_gradient_sums_tag, T>(taps * layout.channel_stride);
    return demand;
}

// y = convolution of the input x with weights (no bias): for every image n,
// output channel co and output pixel (oh, ow),
//   y[n][co][oh][ow] = sum over ci, kh, kw of weights[co][ci][kh][kw]
//                      * x[n][ci][oh * stride + kh - padding][ow * stride + kw - padding],
// reading zero outside the input. Every element of y is written.
//
// Each of the three kernels takes its scratch from `scratch` (scratch.hpp):
// per-thread buffers when it is empty, otherwise the caller's region of at
// least convolution_forward_scratch<T>(shape).region_bytes() bytes (for this
// kernel; the _backward_input_ and _backward_weights_ demands for the
// others), and then allocates nothing.
//
// With an input map (input_map.hpp; for the shapes
// convolution_takes_input_map accepts, std::invalid_argument otherwise),
// forward and weight gradient read x as if every value were mapped first:
// the same bits as the kernel on the mapped input, with no pass to map it.
//
// Where output_statistics is given (reduction.hpp), forward also writes the
// batch mean and variance of each output channel, what a batch
// normalisation after the convolution needs: in Winograd's form from each
// image's results while they are in the core's caches (winograd.hpp,
// result_statistics; equal to channel_mean_variance's up to rounding), in
// the direct form as channel_mean_variance computes them over y (the same
// bits; up to 32 output channels, a group of images at a time as soon as
// it is written: detail::forward_with_statistics).
template <class T>
void convolution_forward(const convolution_shape& shape, const T* x, const T* weights, T* y,
                         std::span<std::byte> scratch = {}, affine_relu_map<T> input_map = {},
                         channel_statistics<T> output_statistics = {})
{
    PETRA_PROFILE_KERNEL(
        "convolution forward", detail::convolution_geometry, detail::convolution_sizes(shape), double(shape.flops()),
        detail::convolution_bytes(shape.input_count() + shape.weight_count(), shape.output_count(), T(0)));
    validate(shape);
    detail::require_input_map_shape(shape, input_map, "convolution_forward");
    if (shape.batch == 0) return;
    scratch_source source(scratch);
    if (detail::winograd_applies(shape)) {
        detail::winograd_forward(shape, x, weights, y, T(0), source, input_map, output_statistics);
    } else if (output_statistics && shape.out_channels <= detail::channel_chunk) {
        detail::forward_with_statistics(shape, x, weights, y, source, output_statistics);
    } else {
        detail::forward_accumulate(shape, x, weights, y, T(0), source);
        if (output_statistics) {
            channel_mean_variance(shape.batch, shape.out_channels, shape.out_height() * shape.out_width(), y,
                                  output_statistics.mean, output_statistics.variance);
        }
    }
}

// grad_x = (gradient of the forward pass with respect to its input,
// applied to grad_y) + beta * grad_x. With beta == 0, grad_x is
// not read on entry. Computed phase by phase as stride-1 correlations of
// grad_y (see detail::backward_input_by_phases).
template <class T>
void convolution_backward_input(const convolution_shape& shape, const T* grad_y, const T* weights, T* grad_x,
                                T beta = T(0), std::span<std::byte> scratch = {})
{
    PETRA_PROFILE_KERNEL(
        "convolution input gradient", detail::convolution_geometry, detail::convolution_sizes(shape),
        double(shape.flops()),
        detail::convolution_bytes(shape.output_count() + shape.weight_count(), shape.input_count(), beta));
    validate(shape);
    if (shape.batch == 0) return;
    scratch_source source(scratch);
    if (detail::winograd_applies(shape)) {
        detail::winograd_backward_input(shape, grad_y, weights, grad_x, beta, source);
    } else {
        detail::backward_input_by_phases(shape, grad_y, weights, grad_x, beta, source);
    }
}

// grad_weights = (gradient of the forward pass with respect to its weights,
// applied to grad_y, summed over the batch) + beta * grad_weights. With
// beta == 0, grad_weights is not read on entry; beta == 1 accumulates.
// x is mapped by input_map where it is given, as in convolution_forward.
template <class T>
void convolution_backward_weights(const convolution_shape& shape, const T* x, const T* grad_y, T* grad_weights,
                                  T beta = T(0), std::span<std::byte> scratch = {}, affine_relu_map<T> input_map = {})
{
    PETRA_PROFILE_KERNEL(
        "convolution weight gradient", detail::convolution_geometry, detail::convolution_sizes(shape),
        double(shape.flops()),
        detail::convolution_bytes(shape.input_count() + shape.output_count(), shape.weight_count(), beta));
    validate(shape);
    detail::require_input_map_shape(shape, input_map, "convolution_backward_weights");
    detail::scale_in_place(grad_weights, shape.weight_count(), beta);
    if (shape.batch == 0) return;
    scratch_source source(scratch);
    if (detail::winograd_applies(shape)) {
        detail::winograd_weight_gradient(
            detail::forward_winograd_geometry<T>(shape, detail::winograd_output_tile(shape)), x, grad_y, grad_weights,
            source, input_map);
        return;
    }
    if (detail::uses_dot_product_gradient<T>(shape)) {
        detail::dot_product_gradient(shape, detail::prepare_input(shape, x, source), grad_y, grad_weights, source);
        return;
    }
    detail::weight_gradient(shape, x, grad_y, grad_weights, source);
}

} // namespace petra::kernels
