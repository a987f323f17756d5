// Element-wise maps over contiguous arrays: sums, scaled sums, scaling and the
// ReLU with its vector-Jacobian product.
//
// Every function here takes a length n (0 is allowed and writes nothing) and
// raw pointers that need no particular alignment. Each is one expression that
// detail::map applies to whole vectors of simd<T> and then, for the last
// n % simd_width<T> elements, to scalars; the expression rounds the same way on
// both, so the result of an element does not depend on where it falls.
#pragma once

#include <cstddef>
#include <type_traits>

#include <xsimd/xsimd.hpp>

#include <petra/kernels/profile.hpp>
#include <petra/kernels/simd.hpp>

namespace petra::kernels {

namespace detail {

// How the profile records of these maps read their one size (see
// kernels/profile.hpp). FLOPs counted: one per element for a sum,
// difference or product, two for a multiply-add, none for the ReLU's
// selections. Bytes: each array once per element.
inline constexpr const char* values_geometry = "%zu values";

// out[i] = expression(inputs[i]...) for i in [0, n): on whole vectors, then
// on the scalars that remain. out may be one of the inputs.
template <class T, class Expression, class... Inputs>
void map(std::size_t n, Expression&& expression, T* out, const Inputs*... inputs)
{
    using vector = simd<T>;
    constexpr std::size_t width = vector::size;
    // The bound n - n % width, rather than i + width <= n, states the trip
    // count without an addition that could wrap; g++ 12 otherwise reports a
    // false "iteration ... invokes undefined behavior" when it inlines this.
    const std::size_t vector_end = n - n % width;
    std::size_t i = 0;
    for (; i < vector_end; i += width) expression(vector::load_unaligned(inputs + i)...).store_unaligned(out + i);
    for (; i < n; ++i) out[i] = expression(inputs[i]...);
}

// condition ? if_true : if_false, on scalars or lane by lane on vectors.
template <class T>
T choose(bool condition, T if_true, T if_false)
{
    return condition ? if_true : if_false;
}

template <class T, class A>
xsimd::batch<T, A> choose(const xsimd::batch_bool<T, A>& condition, const xsimd::batch<T, A>& if_true,
                          const xsimd::batch<T, A>& if_false)
{
    return xsimd::select(condition, if_true, if_false);
}

} // namespace detail

// out[i] = x[i] + y[i] for i in [0, n). The sum is rounded once, so the result
// is exactly the scalar x[i] + y[i]. out may be x or y itself (in-place
// accumulation); any other overlap between out and an input is not allowed.
template <class T>
void add(std::size_t n, const T* x, const T* y, T* out)
{
    static_assert(std::is_floating_point_v<T>, "add is defined for float and double");
    PETRA_PROFILE_KERNEL("add", detail::values_geometry, {n}, double(n), 3.0 * double(n * sizeof(T)));
    detail::map(
        n, [](auto a, auto b) { return a + b; }, out, x, y);
}

// out[i] = x[i] - y[i] for i in [0, n), rounded once. out may be x or y
// itself; any other overlap between out and an input is not allowed.
template <class T>
void subtract(std::size_t n, const T* x, const T* y, T* out)
{
    static_assert(std::is_floating_point_v<T>, "subtract is defined for float and double");
    PETRA_PROFILE_KERNEL("subtract", detail::values_geometry, {n}, double(n), 3.0 * double(n * sizeof(T)));
    detail::map(
        n, [](auto a, auto b) { return a - b; }, out, x, y);
}

// y[i] += alpha * x[i] for i in [0, n), as a fused multiply-add (one
// rounding) on every element, so an element may differ from alpha * x[i] +
// y[i] computed in two steps by about one unit in the last place of the
// larger term. x and y must not overlap unless they are the same array (then
// y becomes (1 + alpha) * y up to rounding).
template <class T>
void axpy(std::size_t n, T alpha, const T* x, T* y)
{
    static_assert(std::is_floating_point_v<T>, "axpy is defined for float and double");
    PETRA_PROFILE_KERNEL("axpy", detail::values_geometry, {n}, 2.0 * double(n), 3.0 * double(n * sizeof(T)));
    detail::map(
        n, [alpha](auto a, auto b) { return xsimd::fma(decltype(a)(alpha), a, b); }, y, x, static_cast<const T*>(y));
}

// out[i] = alpha * x[i] for i in [0, n), rounded once, so exactly the scalar
// product. out may be x itself (in-place scaling); any other overlap is not
// allowed.
template <class T>
void scale(std::size_t n, T alpha, const T* x, T* out)
{
    static_assert(std::is_floating_point_v<T>, "scale is defined for float and double");
    PETRA_PROFILE_KERNEL("scale", detail::values_geometry, {n}, double(n), 2.0 * double(n * sizeof(T)));
    detail::map(
        n, [alpha](auto a) { return decltype(a)(alpha) * a; }, out, x);
}

// out[i] = max(x[i], 0) for i in [0, n): x[i] where x[i] > 0, +0 where
// x[i] <= 0 (so -0 becomes +0), and NaN stays NaN, so that a diverging run is
// not hidden behind a ReLU. out may be x itself; any other overlap is not
// allowed.
template <class T>
void relu_forward(std::size_t n, const T* x, T* out)
{
    static_assert(std::is_floating_point_v<T>, "relu_forward is defined for float and double");
    PETRA_PROFILE_KERNEL("relu_forward", detail::values_geometry, {n}, 0.0, 2.0 * double(n * sizeof(T)));
    detail::map(
        n,
        [](auto value) {
            using type = decltype(value);
            return detail::choose(value <= type(0), type(0), value);
        },
        out, x);
}

// grad_x[i] = grad_y[i] where x[i] > 0, and exactly 0 where x[i] <= 0 (or
// x[i] is NaN), for i in [0, n). x is the ReLU's input; its output
// y = relu_forward(x) may be passed instead, because y > 0 exactly where x > 0.
// The zero is selected, not multiplied, so it stays 0 even where grad_y is
// infinite or NaN. grad_x may be x or grad_y itself; any other overlap is
// not allowed.
template <class T>
void relu_backward(std::size_t n, const T* x, const T* grad_y, T* grad_x)
{
    static_assert(std::is_floating_point_v<T>, "relu_backward is defined for float and double");
    PETRA_PROFILE_KERNEL("relu_backward", detail::values_geometry, {n}, 0.0, 3.0 * double(n * sizeof(T)));
    detail::map(
        n,
        [](auto value, auto gradient) {
            using type = decltype(value);
            return detail::choose(value > type(0), gradient, type(0));
        },
        grad_x, x, grad_y);
}

} // namespace petra::kernels
