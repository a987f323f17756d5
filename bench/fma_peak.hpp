// The peak floating-point rate of one core, measured: a loop of independent
// fused multiply-adds on the widest float vectors the translation unit is
// compiled for (xsimd's batch<float>, the vector every kernel uses). It is
// the denominator of every "% of peak" figure (bench/breakdown.cpp,
// scripts/peer).
//
// Enough independent accumulators cover the FMA latency times the number of
// FMA pipes (4 cycles x 2 pipes on current x86 cores: 8 in flight), so the
// loop is bound by FMA throughput alone; 16 of them (12 with 16 vector
// registers) leave room for the two constant operands without spilling.
// Each step is a = a * 0.9999999 + 1e-7, which stays near 1: no overflow,
// no subnormal slowdown.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <vector>

#include <xsimd/xsimd.hpp>

#include <petra/kernels/gemm.hpp>

namespace petra::bench {

inline constexpr std::size_t fma_accumulators = kernels::gemm_blocking<float>::wide_register_file ? 16 : 12;

// FLOPs of one call of fma_loop(iterations): two per lane per FMA.
inline double fma_loop_flops(std::size_t iterations)
{
    return 2.0 * double(iterations) * double(fma_accumulators) * double(xsimd::batch<float>::size);
}

// Runs iterations rounds of fma_accumulators independent vector FMAs from
// `start` (about 1; callers pass a value the compiler cannot see, so that the
// loop is neither folded nor hoisted out of a timing loop) and returns a
// value depending on all of them (so that none is dropped).
inline float fma_loop(std::size_t iterations, float start)
{
    using vector = xsimd::batch<float>;
    vector accumulator[fma_accumulators];
    for (std::size_t a = 0; a < fma_accumulators; ++a) accumulator[a] = vector(start + 1e-3f * float(a));
    const vector factor(0.9999999f), term(1e-7f);
    for (std::size_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 16
        for (std::size_t a = 0; a < fma_accumulators; ++a) accumulator[a] = xsimd::fma(accumulator[a], factor, term);
    }
    vector total = accumulator[0];
    for (std::size_t a = 1; a < fma_accumulators; ++a) total += accumulator[a];
    return xsimd::hadd(total);
}

// GFLOP/s of one timed run of fma_loop(iterations).
inline double fma_trial_gflops(std::size_t iterations)
{
    static volatile float opaque = 1.0f;
    const auto start = std::chrono::steady_clock::now();
    opaque = fma_loop(iterations, opaque) / float(fma_accumulators * xsimd::batch<float>::size);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return fma_loop_flops(iterations) / seconds / 1e9;
}

// Iterations of fma_loop that take at least `seconds` here.
inline std::size_t fma_iterations_for(double seconds)
{
    std::size_t iterations = 1 << 12;
    while (fma_loop_flops(iterations) / (fma_trial_gflops(iterations) * 1e9) < seconds) iterations *= 2;
    return iterations;
}

// GFLOP/s of one core: the median of `trials` timed runs of at least
// `seconds_per_trial` each (the median, like every figure of
// bench/RESULTS.md: on a shared machine, measured under the same load as the
// figures it divides).
inline double fma_peak_gflops(int trials = 5, double seconds_per_trial = 0.05)
{
    const std::size_t iterations = fma_iterations_for(seconds_per_trial);
    std::vector<double> rates;
    for (int trial = 0; trial < trials; ++trial) rates.push_back(fma_trial_gflops(iterations));
    std::sort(rates.begin(), rates.end());
    return rates[rates.size() / 2];
}

} // namespace petra::bench
