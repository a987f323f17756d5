// The update of stochastic gradient descent with momentum, fused into one
// pass over the parameters (floor 1: it knows nothing of layers).
//
// For each i in [0, n), with g the gradient scaled and decayed:
//   g = gradient_scale * gradient[i] + weight_decay * decay_mask[i] * parameters[i]
//   velocity[i]   = momentum * velocity[i] + g
//   step          = nesterov ? g + momentum * velocity[i] : velocity[i]
//   parameters[i] = parameters[i] - learning_rate * step
// decay_mask[i] is 1 for a parameter that decays (a weight) and 0 for one that
// does not (a bias, a batch-norm scale or shift). Each line is one or two
// fused multiply-adds, on vectors and on the scalars of the tail. Built for a
// target with FMA (as petra's own targets, -march=native, are), an element's
// result does not depend on where it falls; without FMA the vector path
// rounds the product and the sum separately, so the tail may differ from it
// by a rounding. No argument may overlap another.
#pragma once

#include <cstddef>
#include <type_traits>

#include <xsimd/xsimd.hpp>

#include <petra/kernels/profile.hpp>
#include <petra/kernels/simd.hpp>

namespace petra::kernels {

template <class T>
struct sgd_coefficients {
    T learning_rate;
    T momentum;
    T weight_decay;
    T gradient_scale; // 1 / k when the gradient is a sum over k micro-batches
    bool nesterov;
};

namespace detail {

// One element or one vector of the update; V is T or simd<T>.
template <class V, class T>
inline void sgd_element(const sgd_coefficients<T>& c, V mask, V gradient, V& velocity, V& parameter)
{
    const V decayed = xsimd::fma(V(c.weight_decay) * mask, parameter, V(c.gradient_scale) * gradient);
    velocity = xsimd::fma(V(c.momentum), velocity, decayed);
    const V step = c.nesterov ? xsimd::fma(V(c.momentum), velocity, decayed) : velocity;
    parameter = xsimd::fma(V(-c.learning_rate), step, parameter);
}

} // namespace detail

template <class T>
void sgd_update(std::size_t n, const sgd_coefficients<T>& coefficients, const T* decay_mask, const T* gradient,
                T* velocity, T* parameters)
{
    static_assert(std::is_floating_point_v<T>, "sgd_update is defined for float and double");
    // Two products and four multiply-adds per element; mask and gradient
    // read, velocity and parameters read and written.
    PETRA_PROFILE_KERNEL("sgd_update", "%zu parameters", {n}, 10.0 * double(n), 6.0 * double(n * sizeof(T)));
    using vector = simd<T>;
    constexpr std::size_t width = vector::size;
    const std::size_t vector_end = n - n % width;
    std::size_t i = 0;
    for (; i < vector_end; i += width) {
        vector v = vector::load_unaligned(velocity + i), p = vector::load_unaligned(parameters + i);
        detail::sgd_element(coefficients, vector::load_unaligned(decay_mask + i), vector::load_unaligned(gradient + i),
                            v, p);
        v.store_unaligned(velocity + i);
        p.store_unaligned(parameters + i);
    }
    for (; i < n; ++i) detail::sgd_element(coefficients, decay_mask[i], gradient[i], velocity[i], parameters[i]);
}

} // namespace petra::kernels
