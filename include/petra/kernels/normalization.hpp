// The per-channel maps and sums of batch normalisation, on NCHW batches laid
// out as in reduction.hpp: N examples, C channels, S positions per channel
// (an argument struct's batch, channels and positions), element (n, c, s) at
// [(n * C + c) * S + s]. Per-channel coefficients are
// arrays of C values. Each element is computed with fused multiply-adds on
// vectors and on the scalars of a row's tail; on a target with FMA its result
// does not depend on where it falls (see kernels/optimizer.hpp).
#pragma once

#include <algorithm>
#include <cstddef>
#include <type_traits>

#include <xsimd/xsimd.hpp>

#include <petra/kernels/elementwise.hpp>
#include <petra/kernels/layout.hpp>
#include <petra/kernels/profile.hpp>
#include <petra/kernels/reduction.hpp>
#include <petra/kernels/simd.hpp>

namespace petra::kernels {

namespace detail {

// For every row (n, c): out[s] = element(inputs[s]...) with element =
// element_of(c), on vectors and then on the row's last S % width scalars.
// element_of(c) is called once per row and must return a callable that
// holds its channel's coefficients by value: read through pointers inside
// the loop, they would be reloaded and broadcast for every vector, since
// the compiler must assume that each store to out may have changed them;
// that store-then-reload chain made channel_relu_combination 1.8 times
// slower with its rows in cache and 1.3 times slower in the training step
// (bench/RESULTS.md, "Training step").
// On AVX-512 (float) a row's last S % width values are one masked vector
// (masked loads do not fault past the row): the same fused operations on
// each value as the scalars', so the same bits.
template <class T, class ElementOf, class... Inputs>
void channel_map(std::size_t N, std::size_t C, std::size_t S, ElementOf&& element_of, T* out, const Inputs*... inputs)
{
    using vector = simd<T>;
    constexpr std::size_t width = vector::size;
    const std::size_t vector_end = S - S % width;
    for (std::size_t n = 0; n < N; ++n) {
        for (std::size_t c = 0; c < C; ++c) {
            const auto element = element_of(c);
            const std::size_t row = (n * C + c) * S;
            std::size_t s = 0;
            for (; s < vector_end; s += width) {
                element(vector::load_unaligned(inputs + row + s)...).store_unaligned(out + row + s);
            }
#if defined(__AVX512F__)
            if constexpr (std::is_same_v<T, float> && (std::is_same_v<Inputs, float> && ...) && width == 16) {
                if (s < S) {
                    const __mmask16 tail = first_lanes(S - s);
                    const vector values = element(vector(_mm512_maskz_loadu_ps(tail, inputs + row + s))...);
                    _mm512_mask_storeu_ps(out + row + s, tail, values);
                }
                continue;
            }
#endif
            for (; s < S; ++s) out[row + s] = element(inputs[row + s]...);
        }
    }
}

} // namespace detail

// The arguments of channel_affine and channel_affine_relu: y = scale[c] * x +
// shift[c] on a batch of `batch` examples, `channels` channels and
// `positions` positions per channel. With an addend, the map's value v is
// combined with it as the block that follows would (a coupling's y = x~ +
// F(x), its inverse's x~ = y - F(y~)): y = v + addend, or y = addend - v
// with subtract_from_addend, each exactly as kernels::add and
// kernels::subtract round it, so that the pass over memory they would take
// is saved and no bit changes.
template <class T>
struct channel_affine_arguments {
    std::size_t batch;
    std::size_t channels;
    std::size_t positions;
    const T* x;
    const T* scale; // channels values
    const T* shift; // channels values
    T* y;
    const T* addend = nullptr; // batch * channels * positions values, or none
    bool subtract_from_addend = false;
};

namespace detail {

// channel_map of the maps map_of(c) makes over the arguments' batch,
// combined with their addend where they have one.
template <class T, class MapOf>
void channel_map_onto(const channel_affine_arguments<T>& arguments, MapOf&& map_of)
{
    const std::size_t N = arguments.batch, C = arguments.channels, S = arguments.positions;
    if (arguments.addend == nullptr) {
        channel_map(N, C, S, map_of, arguments.y, arguments.x);
    } else if (!arguments.subtract_from_addend) {
        channel_map(
            N, C, S,
            [&map_of](std::size_t c) {
                return [map = map_of(c)](auto value, auto addend) { return map(value) + addend; };
            },
            arguments.y, arguments.x, arguments.addend);
    } else {
        channel_map(
            N, C, S,
            [&map_of](std::size_t c) {
                return [map = map_of(c)](auto value, auto addend) { return addend - map(value); };
            },
            arguments.y, arguments.x, arguments.addend);
    }
}

// Bytes a channel map moves: x (and the addend) read, y written.
template <class T>
double channel_map_bytes(const channel_affine_arguments<T>& arguments)
{
    const double values = double(arguments.batch * arguments.channels * arguments.positions);
    return (arguments.addend == nullptr ? 2.0 : 3.0) * values * double(sizeof(T));
}

} // namespace detail

// y = scale[c] * x + shift[c] (and the addend, see the arguments). y may be x
// itself (or the addend); no other overlap.
template <class T>
void channel_affine(const channel_affine_arguments<T>& arguments)
{
    static_assert(std::is_floating_point_v<T>, "channel_affine is defined for float and double");
    [[maybe_unused]] const std::size_t N = arguments.batch, C = arguments.channels, S = arguments.positions;
    const T* scale = arguments.scale;
    const T* shift = arguments.shift;
    // One multiply-add per element (and the addend's addition).
    PETRA_PROFILE_KERNEL("channel_affine", detail::channel_geometry, {N, C, S},
                         (arguments.addend == nullptr ? 2.0 : 3.0) * double(N * C * S),
                         detail::channel_map_bytes(arguments));
    detail::channel_map_onto(arguments, [scale, shift](std::size_t c) {
        return [a = scale[c], b = shift[c]](auto value) {
            using V = decltype(value);
            return fused_multiply_add(V(a), value, V(b));
        };
    });
}

// The arguments of channel_combination: grad_x = grad_y_coefficient[c] *
// grad_y + x_coefficient[c] * x + offset[c], the input gradient of batch
// normalisation (see layers/batch_norm.hpp for the coefficients).
template <class T>
struct channel_combination_arguments {
    std::size_t batch;
    std::size_t channels;
    std::size_t positions;
    const T* grad_y;
    const T* x;
    const T* grad_y_coefficient; // channels values
    const T* x_coefficient;      // channels values
    const T* offset;             // channels values
    T* grad_x;
};

// grad_x = grad_y_coefficient[c] * grad_y + x_coefficient[c] * x + offset[c].
// grad_x may be grad_y or x itself; no other overlap.
template <class T>
void channel_combination(const channel_combination_arguments<T>& arguments)
{
    static_assert(std::is_floating_point_v<T>, "channel_combination is defined for float and double");
    const std::size_t N = arguments.batch, C = arguments.channels, S = arguments.positions;
    const T* grad_y_coefficient = arguments.grad_y_coefficient;
    const T* x_coefficient = arguments.x_coefficient;
    const T* offset = arguments.offset;
    // Two multiply-adds per element; grad_y and x read, grad_x written.
    PETRA_PROFILE_KERNEL("channel_combination", detail::channel_geometry, {N, C, S}, 4.0 * double(N * C * S),
                         3.0 * double(N * C * S * sizeof(T)));
    detail::channel_map(
        N, C, S,
        [grad_y_coefficient, x_coefficient, offset](std::size_t c) {
            return [a = grad_y_coefficient[c], b = x_coefficient[c], d = offset[c]](auto gradient, auto value) {
                using V = decltype(value);
                return fused_multiply_add(V(a), gradient, fused_multiply_add(V(b), value, V(d)));
            };
        },
        arguments.grad_x, arguments.grad_y, arguments.x);
}

// The arguments of channel_gradient_sums: per channel, the sum of grad_y and
// the sum of grad_y * (x - mean[c]).
template <class T>
struct channel_gradient_sums_arguments {
    std::size_t batch;
    std::size_t channels;
    std::size_t positions;
    const T* grad_y;
    const T* x;
    const T* mean;           // channels values
    T* sum_grad_y;           // channels values
    T* sum_grad_y_deviation; // channels values
};

namespace detail {

// The sums of channel_gradient_sums, over the gradient as gate(c, grad_y, x)
// makes it from grad_y and x (grad_y itself, or grad_y where a ReLU let the
// value through).
//
// The batch is read in memory order, image by image and, within an image,
// a chunk of channels after another (rows (n, c) are contiguous for
// consecutive c), so that it streams from memory: reading a channel's rows
// across the images instead jumps C * S values between rows of S, and ran
// 2 to 2.8 times slower on the reference network's shapes when the batch
// came from memory (bench/RESULTS.md). As in reduction.hpp, a row is summed
// on two vector accumulators per sum, which take its vectors in turn, and
// added as vectors to its channel's; the S % width values at each row's end
// go to one scalar per sum of the channel; the lanes and the scalar are
// added at the end. The order is fixed by N, C, S and the vector width
// alone: each channel takes its rows in the order of n whatever the chunk,
// so the chunk's size changes no bit.
//
// A chunk is 64 channels (two pairs of vectors and two scalars each: 20 KiB
// of stack with AVX-512's vectors, 5 KiB with 128-bit ones), not
// reduction.hpp's 32: with 32, the 64 channels of 7x7 positions were walked
// twice, half an image's contiguous values at a time (6 KiB), and from
// memory ran 1.3 times slower than in one walk (Zen 5, bench_kernels'
// channel/relu_gradient_sums/channels:64/positions:49/x_cold:1, 61.5-66.8
// against 46.4-48.7 us; bench/RESULTS.md).
template <class T, class Gate>
void gated_gradient_sums(const channel_gradient_sums_arguments<T>& arguments, Gate&& gate)
{
    using vector = simd<T>;
    constexpr std::size_t width = vector::size;
    constexpr std::size_t chunk = 64;
    const std::size_t N = arguments.batch, C = arguments.channels, S = arguments.positions;
    const std::size_t vector_end = S - S % width;
    const T* grad_y = arguments.grad_y;
    const T* x = arguments.x;
    const T* mean = arguments.mean;
    struct channel_sums {
        vector grad[2], grad_deviation[2];
        T tail_grad, tail_grad_deviation;
    };
    channel_sums sums[chunk];
    for (std::size_t c0 = 0; c0 < C; c0 += chunk) {
        const std::size_t channels = std::min(chunk, C - c0);
        for (std::size_t k = 0; k < channels; ++k) {
            sums[k].grad[0] = sums[k].grad[1] = sums[k].grad_deviation[0] = sums[k].grad_deviation[1] = vector(T(0));
            sums[k].tail_grad = sums[k].tail_grad_deviation = T(0);
        }
        for (std::size_t n = 0; n < N; ++n) {
            for (std::size_t k = 0; k < channels; ++k) {
                const std::size_t c = c0 + k;
                const T* gradient = grad_y + (n * C + c) * S;
                const T* value = x + (n * C + c) * S;
                const vector center(mean[c]);
                vector grad0(T(0)), grad1(T(0)), deviation0(T(0)), deviation1(T(0));
                std::size_t s = 0;
                for (; s < vector_end - vector_end % (2 * width); s += 2 * width) {
                    const vector x0 = vector::load_unaligned(value + s);
                    const vector x1 = vector::load_unaligned(value + s + width);
                    const vector g0 = gate(c, vector::load_unaligned(gradient + s), x0);
                    const vector g1 = gate(c, vector::load_unaligned(gradient + s + width), x1);
                    grad0 += g0;
                    grad1 += g1;
                    deviation0 = xsimd::fma(g0, x0 - center, deviation0);
                    deviation1 = xsimd::fma(g1, x1 - center, deviation1);
                }
                if (s < vector_end) {
                    const vector x0 = vector::load_unaligned(value + s);
                    const vector g0 = gate(c, vector::load_unaligned(gradient + s), x0);
                    grad0 += g0;
                    deviation0 = xsimd::fma(g0, x0 - center, deviation0);
                }
                for (s = vector_end; s < S; ++s) {
                    const T gs = gate(c, gradient[s], value[s]);
                    sums[k].tail_grad += gs;
                    sums[k].tail_grad_deviation = xsimd::fma(gs, value[s] - mean[c], sums[k].tail_grad_deviation);
                }
                sums[k].grad[0] += grad0;
                sums[k].grad[1] += grad1;
                sums[k].grad_deviation[0] += deviation0;
                sums[k].grad_deviation[1] += deviation1;
            }
        }
        for (std::size_t k = 0; k < channels; ++k) {
            arguments.sum_grad_y[c0 + k] = horizontal_sum(sums[k].grad) + sums[k].tail_grad;
            arguments.sum_grad_y_deviation[c0 + k] =
                horizontal_sum(sums[k].grad_deviation) + sums[k].tail_grad_deviation;
        }
    }
}

// grad_y where scale[c] * x + shift[c] > 0, else exactly 0: the gradient of a
// ReLU that follows the affine map, read from the map's input (the map is
// evaluated as channel_affine evaluates it, so the two agree on every
// element).
template <class T>
struct relu_gate {
    const T* scale;
    const T* shift;

    // The gate of channel c, holding its coefficients (see channel_map).
    struct channel_gate {
        T scale, shift;

        template <class V>
        V operator()(V gradient, V x) const
        {
            return choose(fused_multiply_add(V(scale), x, V(shift)) > V(T(0)), gradient, V(T(0)));
        }
    };

    channel_gate of_channel(std::size_t c) const { return {scale[c], shift[c]}; }

    template <class V>
    V operator()(std::size_t c, V gradient, V x) const
    {
        return of_channel(c)(gradient, x);
    }
};

} // namespace detail

// sum_grad_y[c] = sum of grad_y over channel c, and
// sum_grad_y_deviation[c] = sum of grad_y * (x - mean[c]) over it: the two
// sums of batch normalisation's backward pass, accumulated in memory order
// (detail::gated_gradient_sums). The outputs must not overlap the inputs.
template <class T>
void channel_gradient_sums(const channel_gradient_sums_arguments<T>& arguments)
{
    static_assert(std::is_floating_point_v<T>, "channel_gradient_sums is defined for float and double");
    [[maybe_unused]] const std::size_t N = arguments.batch, C = arguments.channels, S = arguments.positions;
    // An addition, a subtraction and a multiply-add per element; grad_y and x read.
    PETRA_PROFILE_KERNEL("channel_gradient_sums", detail::channel_geometry, {N, C, S}, 4.0 * double(N * C * S),
                         double((2 * N * C * S + 2 * C) * sizeof(T)));
    detail::gated_gradient_sums(arguments, [](std::size_t, auto gradient, auto) { return gradient; });
}

// Batch normalisation followed by a ReLU, fused: one pass instead of two
// over the activation, and the normalised values never stored.

// y = max(scale[c] * x + shift[c], 0), with relu_forward's treatment of -0
// and NaN (elementwise.hpp): what channel_affine then relu_forward give, in
// one pass (and the addend, see the arguments). y may be x itself (or the
// addend); no other overlap.
template <class T>
void channel_affine_relu(const channel_affine_arguments<T>& arguments)
{
    static_assert(std::is_floating_point_v<T>, "channel_affine_relu is defined for float and double");
    [[maybe_unused]] const std::size_t N = arguments.batch, C = arguments.channels, S = arguments.positions;
    const T* scale = arguments.scale;
    const T* shift = arguments.shift;
    // A multiply-add and a comparison per element (and the addend's addition).
    PETRA_PROFILE_KERNEL("channel_affine_relu", detail::channel_geometry, {N, C, S},
                         (arguments.addend == nullptr ? 3.0 : 4.0) * double(N * C * S),
                         detail::channel_map_bytes(arguments));
    detail::channel_map_onto(arguments, [scale, shift](std::size_t c) {
        return [a = scale[c], b = shift[c]](auto value) {
            using V = decltype(value);
            // Rounded once, as affine_relu_map (input_map.hpp) rounds it.
            const V affine = fused_multiply_add(V(a), value, V(b));
            return detail::choose(affine <= V(T(0)), V(T(0)), affine);
        };
    });
}

// The arguments of channel_relu_gradient_sums: those of channel_gradient_sums
// and the affine map (scale, shift) that the ReLU follows.
template <class T>
struct channel_relu_gradient_sums_arguments {
    std::size_t batch;
    std::size_t channels;
    std::size_t positions;
    const T* grad_y;         // the gradient of the ReLU's output
    const T* x;              // the affine map's input
    const T* mean;           // channels values
    const T* scale;          // channels values
    const T* shift;          // channels values
    T* sum_grad_y;           // channels values
    T* sum_grad_y_deviation; // channels values
};

// channel_gradient_sums of the gradient behind a ReLU: grad_y replaced by
// grad_y where scale[c] * x + shift[c] > 0 and by 0 elsewhere (x is the
// affine map's input). Equal, sum for sum, to relu_backward on the map's
// output and then channel_gradient_sums.
template <class T>
void channel_relu_gradient_sums(const channel_relu_gradient_sums_arguments<T>& arguments)
{
    static_assert(std::is_floating_point_v<T>, "channel_relu_gradient_sums is defined for float and double");
    const std::size_t N = arguments.batch, C = arguments.channels, S = arguments.positions;
    // The gate (a multiply-add and a comparison), then channel_gradient_sums' work; grad_y and x read.
    PETRA_PROFILE_KERNEL("channel_relu_gradient_sums", detail::channel_geometry, {N, C, S}, 7.0 * double(N * C * S),
                         double((2 * N * C * S + 2 * C) * sizeof(T)));
    detail::gated_gradient_sums(
        channel_gradient_sums_arguments<T>{.batch = N,
                                           .channels = C,
                                           .positions = S,
                                           .grad_y = arguments.grad_y,
                                           .x = arguments.x,
                                           .mean = arguments.mean,
                                           .sum_grad_y = arguments.sum_grad_y,
                                           .sum_grad_y_deviation = arguments.sum_grad_y_deviation},
        detail::relu_gate<T>{arguments.scale, arguments.shift});
}

// The arguments of channel_relu_combination: those of channel_combination
// and the affine map (scale, shift) that the ReLU follows.
template <class T>
struct channel_relu_combination_arguments {
    std::size_t batch;
    std::size_t channels;
    std::size_t positions;
    const T* grad_y;             // the gradient of the ReLU's output
    const T* x;                  // the affine map's input
    const T* scale;              // channels values
    const T* shift;              // channels values
    const T* grad_y_coefficient; // channels values
    const T* x_coefficient;      // channels values
    const T* offset;             // channels values
    T* grad_x;
};

// channel_combination of the gradient behind a ReLU, gated as in
// channel_relu_gradient_sums: grad_x = grad_y_coefficient[c] * grad_y' +
// x_coefficient[c] * x + offset[c], with grad_y' the gated grad_y. grad_x may
// be grad_y or x itself; no other overlap.
template <class T>
void channel_relu_combination(const channel_relu_combination_arguments<T>& arguments)
{
    static_assert(std::is_floating_point_v<T>, "channel_relu_combination is defined for float and double");
    const std::size_t N = arguments.batch, C = arguments.channels, S = arguments.positions;
    const T* grad_y_coefficient = arguments.grad_y_coefficient;
    const T* x_coefficient = arguments.x_coefficient;
    const T* offset = arguments.offset;
    // The gate, then two multiply-adds per element; grad_y and x read, grad_x written.
    PETRA_PROFILE_KERNEL("channel_relu_combination", detail::channel_geometry, {N, C, S}, 7.0 * double(N * C * S),
                         3.0 * double(N * C * S * sizeof(T)));
    const detail::relu_gate<T> gate{arguments.scale, arguments.shift};
    detail::channel_map(
        N, C, S,
        [grad_y_coefficient, x_coefficient, offset, gate](std::size_t c) {
            return [gated = gate.of_channel(c), a = grad_y_coefficient[c], b = x_coefficient[c], d = offset[c]](
                       auto gradient, auto value) {
                using V = decltype(value);
                return fused_multiply_add(V(a), gated(gradient, value), fused_multiply_add(V(b), value, V(d)));
            };
        },
        arguments.grad_x, arguments.grad_y, arguments.x);
}

} // namespace petra::kernels
