// A map a convolution kernel applies to its input as it reads it (floor 1):
// value v of input channel c becomes max(scale[c] * v + shift[c], 0), one
// fused multiply-add and a comparison, rounded exactly as
// channel_affine_relu (normalization.hpp) rounds it where the vector
// multiply-add is fused (x86-64 with FMA3 or AVX-512, aarch64; a build for
// SSE2 alone would round that kernel's vectors twice). A kernel given the map
// computes, bit for bit, what it computes on the mapped input, without the
// mapped input ever being written: the batch normalisation and ReLU before a
// convolution, fused into its input's gather.
#pragma once

#include <cmath>
#include <cstddef>

namespace petra::kernels {

template <class T>
struct affine_relu_map {
    const T* scale = nullptr; // one value per input channel; null: no map
    const T* shift = nullptr; // one value per input channel

    constexpr explicit operator bool() const { return scale != nullptr; }

    // The mapped value of v in channel c (NaN stays NaN, -0 becomes 0).
    T operator()(std::size_t c, T v) const
    {
        const T affine = std::fma(scale[c], v, shift[c]);
        return affine <= T(0) ? T(0) : affine;
    }
};

} // namespace petra::kernels
