// Element-wise maps over contiguous arrays: sums, scaled sums, scaling and the
// ReLU with its vector-Jacobian product.
//
// Every function here takes a length n (0 is allowed and writes nothing) and
// raw pointers that need no particular alignment. The main loop runs on whole
// vectors of simd<T> and a scalar loop finishes the last n % simd_width<T>
// elements, so the result of an element does not depend on where it falls.
#pragma once

#include <cstddef>
#include <type_traits>

#include <xsimd/xsimd.hpp>

#include <petra/kernels/simd.hpp>

namespace petra::kernels {

// out[i] = x[i] + y[i] for i in [0, n). The sum is rounded once, so the result
// is exactly the scalar x[i] + y[i]. out may be x or y itself (in-place
// accumulation); any other overlap between out and an input is not allowed.
template <class T>
void add(std::size_t n, const T* x, const T* y, T* out)
{
    static_assert(std::is_floating_point_v<T>, "add is defined for float and double");
    using vector = simd<T>;
    constexpr std::size_t width = vector::size;
    std::size_t i = 0;
    for (; i + width <= n; i += width) {
        (vector::load_unaligned(x + i) + vector::load_unaligned(y + i)).store_unaligned(out + i);
    }
    for (; i < n; ++i) out[i] = x[i] + y[i];
}

// y[i] += alpha * x[i] for i in [0, n). The vector loop uses a fused
// multiply-add (one rounding); the scalar tail may round the product and the
// sum separately, so an element may differ from alpha * x[i] + y[i] computed
// in two steps by about one unit in the last place of the larger term. x and y
// must not overlap unless they are the same array (then y becomes
// (1 + alpha) * y up to rounding).
template <class T>
void axpy(std::size_t n, T alpha, const T* x, T* y)
{
    static_assert(std::is_floating_point_v<T>, "axpy is defined for float and double");
    using vector = simd<T>;
    constexpr std::size_t width = vector::size;
    const vector alpha_v(alpha);
    std::size_t i = 0;
    for (; i + width <= n; i += width) {
        xsimd::fma(alpha_v, vector::load_unaligned(x + i), vector::load_unaligned(y + i)).store_unaligned(y + i);
    }
    for (; i < n; ++i) y[i] += alpha * x[i];
}

// out[i] = alpha * x[i] for i in [0, n), rounded once, so exactly the scalar
// product. out may be x itself (in-place scaling); any other overlap is not
// allowed.
template <class T>
void scale(std::size_t n, T alpha, const T* x, T* out)
{
    static_assert(std::is_floating_point_v<T>, "scale is defined for float and double");
    using vector = simd<T>;
    constexpr std::size_t width = vector::size;
    const vector alpha_v(alpha);
    std::size_t i = 0;
    for (; i + width <= n; i += width) {
        (alpha_v * vector::load_unaligned(x + i)).store_unaligned(out + i);
    }
    for (; i < n; ++i) out[i] = alpha * x[i];
}

// out[i] = max(x[i], 0) for i in [0, n): x[i] where x[i] > 0, +0 where
// x[i] <= 0 (so -0 becomes +0), and NaN stays NaN, so that a diverging run is
// not hidden behind a ReLU. out may be x itself; any other overlap is not
// allowed.
template <class T>
void relu_forward(std::size_t n, const T* x, T* out)
{
    static_assert(std::is_floating_point_v<T>, "relu_forward is defined for float and double");
    using vector = simd<T>;
    constexpr std::size_t width = vector::size;
    const vector zero(T(0));
    std::size_t i = 0;
    for (; i + width <= n; i += width) {
        const vector value = vector::load_unaligned(x + i);
        xsimd::select(value <= zero, zero, value).store_unaligned(out + i);
    }
    for (; i < n; ++i) out[i] = x[i] <= T(0) ? T(0) : x[i];
}

// grad_in[i] = grad_out[i] where x[i] > 0, and exactly 0 where x[i] <= 0 (or
// x[i] is NaN), for i in [0, n). x is the ReLU's input; its output
// y = relu_forward(x) may be passed instead, because y > 0 exactly where x > 0.
// The zero is selected, not multiplied, so it stays 0 even where grad_out is
// infinite or NaN. grad_in may be x or grad_out itself; any other overlap is
// not allowed.
template <class T>
void relu_backward(std::size_t n, const T* x, const T* grad_out, T* grad_in)
{
    static_assert(std::is_floating_point_v<T>, "relu_backward is defined for float and double");
    using vector = simd<T>;
    constexpr std::size_t width = vector::size;
    const vector zero(T(0));
    std::size_t i = 0;
    for (; i + width <= n; i += width) {
        const vector passes = vector::load_unaligned(x + i);
        xsimd::select(passes > zero, vector::load_unaligned(grad_out + i), zero).store_unaligned(grad_in + i);
    }
    for (; i < n; ++i) grad_in[i] = x[i] > T(0) ? grad_out[i] : T(0);
}

} // namespace petra::kernels
