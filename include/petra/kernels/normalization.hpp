// The per-channel maps and sums of batch normalisation, on NCHW batches laid
// out as in reduction.hpp: N examples, C channels, S positions per channel,
// element (n, c, s) at [(n * C + c) * S + s]. Per-channel coefficients are
// arrays of C values. Each element is computed with fused multiply-adds on
// vectors and on the scalars of a row's tail; on a target with FMA its result
// does not depend on where it falls (see kernels/optimizer.hpp).
#pragma once

#include <cstddef>
#include <type_traits>

#include <xsimd/xsimd.hpp>

#include <petra/kernels/elementwise.hpp>
#include <petra/kernels/profile.hpp>
#include <petra/kernels/reduction.hpp>
#include <petra/kernels/simd.hpp>

namespace petra::kernels {

namespace detail {

// For every row (n, c): out[s] = element(coefficients of c, inputs[s]...),
// on vectors and then on the row's last S % width scalars.
template <class T, class Element, class... Inputs>
void channel_map(std::size_t N, std::size_t C, std::size_t S, Element&& element, T* out, const Inputs*... inputs)
{
    using vector = simd<T>;
    constexpr std::size_t width = vector::size;
    const std::size_t vector_end = S - S % width;
    for (std::size_t n = 0; n < N; ++n) {
        for (std::size_t c = 0; c < C; ++c) {
            const std::size_t row = (n * C + c) * S;
            std::size_t s = 0;
            for (; s < vector_end; s += width) {
                element(c, vector::load_unaligned(inputs + row + s)...).store_unaligned(out + row + s);
            }
            for (; s < S; ++s) out[row + s] = element(c, inputs[row + s]...);
        }
    }
}

} // namespace detail

// y = scale[c] * x + shift[c]. y may be x itself; no other overlap.
template <class T>
void channel_affine(std::size_t N, std::size_t C, std::size_t S, const T* x, const T* scale, const T* shift, T* y)
{
    static_assert(std::is_floating_point_v<T>, "channel_affine is defined for float and double");
    // One multiply-add per element; x read, y written.
    PETRA_PROFILE_KERNEL("channel_affine", detail::channel_geometry, {N, C, S}, 2.0 * double(N * C * S),
                         2.0 * double(N * C * S * sizeof(T)));
    detail::channel_map(
        N, C, S,
        [scale, shift](std::size_t c, auto value) {
            using V = decltype(value);
            return xsimd::fma(V(scale[c]), value, V(shift[c]));
        },
        y, x);
}

// out = a[c] * g + b[c] * x + d[c]. out may be g or x itself; no other
// overlap.
template <class T>
void channel_combination(std::size_t N, std::size_t C, std::size_t S, const T* g, const T* x, const T* a, const T* b,
                         const T* d, T* out)
{
    static_assert(std::is_floating_point_v<T>, "channel_combination is defined for float and double");
    // Two multiply-adds per element; g and x read, out written.
    PETRA_PROFILE_KERNEL("channel_combination", detail::channel_geometry, {N, C, S}, 4.0 * double(N * C * S),
                         3.0 * double(N * C * S * sizeof(T)));
    detail::channel_map(
        N, C, S,
        [a, b, d](std::size_t c, auto gradient, auto value) {
            using V = decltype(value);
            return xsimd::fma(V(a[c]), gradient, xsimd::fma(V(b[c]), value, V(d[c])));
        },
        out, g, x);
}

namespace detail {

// The sums of channel_gradient_sums, over the gradient as gate(c, g, x)
// makes it from g and x (g itself, or g where a ReLU let the value through).
template <class T, class Gate>
void gated_gradient_sums(std::size_t N, std::size_t C, std::size_t S, const T* g, const T* x, const T* center,
                         T* sum_g_out, T* sum_gd_out, Gate&& gate)
{
    using vector = simd<T>;
    constexpr std::size_t width = vector::size;
    constexpr std::size_t accumulators = reduction_accumulators;
    constexpr std::size_t block = accumulators * width;
    for (std::size_t c = 0; c < C; ++c) {
        T total_g = T(0), total_gd = T(0);
        const vector shift(center[c]);
        for (std::size_t n = 0; n < N; ++n) {
            const T* gradient = g + (n * C + c) * S;
            const T* value = x + (n * C + c) * S;
            vector sum_g[accumulators], sum_gd[accumulators];
            for (std::size_t a = 0; a < accumulators; ++a) sum_g[a] = sum_gd[a] = vector(T(0));
            std::size_t s = 0;
            for (; s < S - S % block; s += block) {
#pragma GCC unroll 4
                for (std::size_t a = 0; a < accumulators; ++a) {
                    const vector xv = vector::load_unaligned(value + s + a * width);
                    const vector gv = gate(c, vector::load_unaligned(gradient + s + a * width), xv);
                    sum_g[a] += gv;
                    sum_gd[a] = xsimd::fma(gv, xv - shift, sum_gd[a]);
                }
            }
            for (; s < S - S % width; s += width) {
                const vector xv = vector::load_unaligned(value + s);
                const vector gv = gate(c, vector::load_unaligned(gradient + s), xv);
                sum_g[0] += gv;
                sum_gd[0] = xsimd::fma(gv, xv - shift, sum_gd[0]);
            }
            T row_g = horizontal_sum(sum_g), row_gd = horizontal_sum(sum_gd);
            for (; s < S; ++s) {
                const T gs = gate(c, gradient[s], value[s]);
                row_g += gs;
                row_gd = xsimd::fma(gs, value[s] - center[c], row_gd);
            }
            total_g += row_g;
            total_gd += row_gd;
        }
        sum_g_out[c] = total_g;
        sum_gd_out[c] = total_gd;
    }
}

// g where scale[c] * x + shift[c] > 0, else exactly 0: the gradient of a
// ReLU that follows the affine map, read from the map's input (the map is
// evaluated as channel_affine evaluates it, so the two agree on every
// element).
template <class T>
struct relu_gate {
    const T* scale;
    const T* shift;

    template <class V>
    V operator()(std::size_t c, V gradient, V x) const
    {
        return choose(xsimd::fma(V(scale[c]), x, V(shift[c])) > V(T(0)), gradient, V(T(0)));
    }
};

} // namespace detail

// sum_g_out[c] = sum of g over channel c, and
// sum_gd_out[c] = sum of g * (x - center[c]) over it: the two sums of batch
// normalisation's backward pass, accumulated as in reduction.hpp (several
// vector accumulators per row, then the rows of a channel). The outputs must
// not overlap the inputs.
template <class T>
void channel_gradient_sums(std::size_t N, std::size_t C, std::size_t S, const T* g, const T* x, const T* center,
                           T* sum_g_out, T* sum_gd_out)
{
    static_assert(std::is_floating_point_v<T>, "channel_gradient_sums is defined for float and double");
    // An addition, a subtraction and a multiply-add per element; g and x read.
    PETRA_PROFILE_KERNEL("channel_gradient_sums", detail::channel_geometry, {N, C, S}, 4.0 * double(N * C * S),
                         double((2 * N * C * S + 2 * C) * sizeof(T)));
    detail::gated_gradient_sums(N, C, S, g, x, center, sum_g_out, sum_gd_out,
                                [](std::size_t, auto gradient, auto) { return gradient; });
}

// Batch normalisation followed by a ReLU, fused: one pass instead of two
// over the activation, and the normalised values never stored.

// y = max(scale[c] * x + shift[c], 0), with relu_forward's treatment of -0
// and NaN (elementwise.hpp): what channel_affine then relu_forward give, in
// one pass. y may be x itself; no other overlap.
template <class T>
void channel_affine_relu(std::size_t N, std::size_t C, std::size_t S, const T* x, const T* scale, const T* shift,
                         T* y)
{
    static_assert(std::is_floating_point_v<T>, "channel_affine_relu is defined for float and double");
    // A multiply-add and a comparison per element; x read, y written.
    PETRA_PROFILE_KERNEL("channel_affine_relu", detail::channel_geometry, {N, C, S}, 3.0 * double(N * C * S),
                         2.0 * double(N * C * S * sizeof(T)));
    detail::channel_map(
        N, C, S,
        [scale, shift](std::size_t c, auto value) {
            using V = decltype(value);
            const V affine = xsimd::fma(V(scale[c]), value, V(shift[c]));
            return detail::choose(affine <= V(T(0)), V(T(0)), affine);
        },
        y, x);
}

// channel_gradient_sums of the gradient behind a ReLU: g replaced by g where
// scale[c] * x + shift[c] > 0 and by 0 elsewhere (x is the affine map's
// input). Equal, sum for sum, to relu_backward on the map's output and then
// channel_gradient_sums.
template <class T>
void channel_relu_gradient_sums(std::size_t N, std::size_t C, std::size_t S, const T* g, const T* x,
                                const T* center, const T* scale, const T* shift, T* sum_g_out, T* sum_gd_out)
{
    static_assert(std::is_floating_point_v<T>, "channel_relu_gradient_sums is defined for float and double");
    // The gate (a multiply-add and a comparison), then channel_gradient_sums' work; g and x read.
    PETRA_PROFILE_KERNEL("channel_relu_gradient_sums", detail::channel_geometry, {N, C, S},
                         7.0 * double(N * C * S), double((2 * N * C * S + 2 * C) * sizeof(T)));
    detail::gated_gradient_sums(N, C, S, g, x, center, sum_g_out, sum_gd_out, detail::relu_gate<T>{scale, shift});
}

// channel_combination of the gradient behind a ReLU, gated as in
// channel_relu_gradient_sums: out = a[c] * g' + b[c] * x + d[c]. out may be g
// or x itself; no other overlap.
template <class T>
void channel_relu_combination(std::size_t N, std::size_t C, std::size_t S, const T* g, const T* x, const T* scale,
                              const T* shift, const T* a, const T* b, const T* d, T* out)
{
    static_assert(std::is_floating_point_v<T>, "channel_relu_combination is defined for float and double");
    // The gate, then two multiply-adds per element; g and x read, out written.
    PETRA_PROFILE_KERNEL("channel_relu_combination", detail::channel_geometry, {N, C, S},
                         7.0 * double(N * C * S), 3.0 * double(N * C * S * sizeof(T)));
    const detail::relu_gate<T> gate{scale, shift};
    detail::channel_map(
        N, C, S,
        [a, b, d, gate](std::size_t c, auto gradient, auto value) {
            using V = decltype(value);
            return xsimd::fma(V(a[c]), gate(c, gradient, value), xsimd::fma(V(b[c]), value, V(d[c])));
        },
        out, g, x);
}

} // namespace petra::kernels
