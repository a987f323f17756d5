// SIMD vocabulary shared by every kernel: the vector type of the build's best
// instruction set, aligned storage, and per-thread scratch that grows once.
#pragma once

#include <cmath>
#include <cstddef>
#include <new>
#include <type_traits>
#include <vector>

#include <xsimd/xsimd.hpp>

// A helper of a kernel's inner loop (a register transposition, a
// transform's row, a masked store) is inlined whatever optimisation level
// the including program chose, and a loop over an array of vectors carries
// PETRA_UNROLL(N), `#pragma GCC unroll N` (which g++ and clang++ honour at
// every level), so that the array lives in registers: at -O2, g++ 12 called
// such helpers and kept such arrays on the stack, and the reference
// network's training step took 1.34 times as long as at -O3
// (bench/RESULTS.md, "The including program's optimisation level").
// PETRA_ALWAYS_INLINE_LAMBDA does the same for a lambda, written after its
// parameter list: one that g++ 12 at -O2 left out of line read every
// variable it captured by reference through its closure again after each
// store. Under a sanitizer (a build that checks, not one that is timed) all
// three are plain, which changes no value: clang++ 14 with AddressSanitizer
// and UBSan at -O1 compiled test_convolution in 96 s with them and 75 s
// without the forced inlining, then in half that time without the
// unrolling as well (78 against 39 s side by side; bench/history/2026-12-06.md).
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define PETRA_SANITIZED_BUILD 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define PETRA_SANITIZED_BUILD 1
#endif
#if defined(__GNUC__) && !defined(PETRA_SANITIZED_BUILD)
#define PETRA_ALWAYS_INLINE inline __attribute__((always_inline))
#define PETRA_ALWAYS_INLINE_LAMBDA __attribute__((always_inline))
#else
#define PETRA_ALWAYS_INLINE inline
#define PETRA_ALWAYS_INLINE_LAMBDA
#endif
#define PETRA_PRAGMA(text) _Pragma(#text)
#if defined(PETRA_SANITIZED_BUILD)
#define PETRA_UNROLL(count)
#else
#define PETRA_UNROLL(count) PETRA_PRAGMA(GCC unroll count)
#endif

namespace petra::kernels {

// The vector of T for the instruction set the translation unit is compiled for
// (AVX-512 with -march=native on a recent Xeon, AVX2+FMA with -mavx2 -mfma).
template <class T>
using simd = xsimd::batch<T>;

template <class T>
inline constexpr std::size_t simd_width = simd<T>::size;

// a * b + c rounded once, on vectors or scalars, wherever the CPU has a fused
// multiply-add: xsimd 8.1 writes its AVX-512 fma as a multiply and an add,
// which g++ fuses (floating-point contraction) and clang++ does not, so the
// two compilers rounded the vectors of a kernel differently from each other
// and from its scalar tail (std::fma), and clang++'s products took two
// instructions for each multiply-add (its training step 1.04 times slower on
// Zen 5; bench/RESULTS.md). Elsewhere xsimd's fma (fused with FMA3 and on
// aarch64; a multiply and an add on SSE2 alone). The kernels' products and
// transforms call this; the memory-bound passes, written for vectors and
// scalars alike, and the three sites whose addend is itself a product keep
// xsimd's fma: in a * b + c * d g++ chooses which product to fuse, and the
// explicit form there changed g++'s values.
template <class V>
inline V fused_multiply_add(const V& a, const V& b, const V& c)
{
    if constexpr (std::is_arithmetic_v<V>) {
        return std::fma(a, b, c);
    } else {
#if defined(__AVX512F__)
        if constexpr (sizeof(V) == 64 && std::is_same_v<typename V::value_type, float>) {
            return V(_mm512_fmadd_ps(a, b, c));
        } else if constexpr (sizeof(V) == 64 && std::is_same_v<typename V::value_type, double>) {
            return V(_mm512_fmadd_pd(a, b, c));
        } else {
            return xsimd::fma(a, b, c);
        }
#else
        return xsimd::fma(a, b, c);
#endif
    }
}

// Alignment of every buffer the kernels allocate: one cache line, which is
// also the widest vector.
inline constexpr std::size_t buffer_alignment = 64;

// The allocator of every buffer the library allocates: memory aligned to
// buffer_alignment, from the aligned operator new. (Not xsimd's allocator,
// which throws std::bad_alloc itself and so does not compile without
// exceptions; here, without exceptions, running out of memory ends the
// program in the operator new.)
template <class T>
struct aligned_allocator {
    using value_type = T;

    aligned_allocator() = default;
    template <class U>
    constexpr aligned_allocator(const aligned_allocator<U>&) noexcept
    {}

    // Left as written: clang-format 14 would put a space after `operator new`.
    // clang-format off
    T* allocate(std::size_t count)
    {
        return static_cast<T*>(::operator new(count * sizeof(T), std::align_val_t{buffer_alignment}));
    }
    // The unsized form: clang++ declares the sized one only with
    // -fsized-deallocation, which it leaves off by default.
    void deallocate(T* values, std::size_t) noexcept { ::operator delete(values, std::align_val_t{buffer_alignment}); }
    // clang-format on

    template <class U>
    constexpr bool operator==(const aligned_allocator<U>&) const noexcept
    {
        return true;
    }
};

template <class T>
using aligned_vector = std::vector<T, aligned_allocator<T>>;

// Sum of the lanes of v. For float this is xsimd's reduction (hadd); for
// double it goes through memory as a pairwise tree, because g++ 12 reports a
// false -Wmaybe-uninitialized inside the AVX-512 intrinsics that xsimd
// inlines for double, which -Werror turns into a failed build.
template <class T>
T lane_sum(const simd<T>& v)
{
    if constexpr (std::is_same_v<T, float>) {
        return xsimd::hadd(v);
    } else {
        constexpr std::size_t width = simd_width<T>;
        alignas(buffer_alignment) T lanes[width];
        v.store_aligned(lanes);
        for (std::size_t half = width / 2; half > 0; half /= 2) {
            for (std::size_t lane = 0; lane < half; ++lane) lanes[lane] += lanes[lane + half];
        }
        return lanes[0];
    }
}

// Scratch owned by the calling thread, tagged so that different kernels never
// share (and so never clobber) one buffer. Contract: the returned pointer is
// aligned, holds at least `count` elements, and stays valid until the next call
// with the same Tag and T on this thread. Memory grows to the largest request
// and is then reused, so a steady state performs no allocation.
template <class Tag, class T>
T* thread_scratch(std::size_t count)
{
    thread_local aligned_vector<T> storage;
    if (storage.size() < count) {
        storage.resize(count);
    }
    return storage.data();
}

} // namespace petra::kernels
