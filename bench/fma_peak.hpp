// The peak floating-point rate of one core, measured: a loop of independent
// fused multiply-adds on the widest float vectors the translation unit is
// compiled for (xsimd's batch<float>, the vector every kernel uses). It is
// the denominator of every "% of peak" figure (bench/breakdown.cpp,
// scripts/peer).
//
// Enough independent accumulators cover the FMA latency times the number of
// FMA pipes (4 cycles x 2 pipes on current x86 cores: 8 in flight), so the
// loop is bound by FMA throughput alone. How many a core runs fastest with
// differs (on one Xeon, 16 chains measured up to a fifth below a loop of 12), so each trial
// times 8, 12 and (with 32 vector registers) 16 chains and keeps the best.
// Each step is a = a * 0.9999999 + 1e-7, which stays near 1: no overflow,
// no subnormal slowdown.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <vector>

#include <xsimd/xsimd.hpp>

#include <petra/kernels/gemm.hpp>

namespace petra::bench {

// The chain counts a trial times.
inline constexpr std::array<std::size_t, 3> fma_chain_counts{8, 12, 16};
inline constexpr std::size_t fma_chain_count_used = kernels::gemm_blocking<float>::wide_register_file ? 3 : 2;

// FLOPs of one call of fma_loop<Chains>(iterations): two per lane per FMA.
inline double fma_loop_flops(std::size_t iterations, std::size_t chains)
{
    return 2.0 * double(iterations) * double(chains) * double(xsimd::batch<float>::size);
}

// Runs iterations rounds of Chains independent vector FMAs from `start`
// (about 1; callers pass a value the compiler cannot see, so that the loop
// is neither folded nor hoisted out of a timing loop) and returns a value
// depending on all of them (so that none is dropped).
template <std::size_t Chains>
float fma_loop(std::size_t iterations, float start)
{
    using vector = xsimd::batch<float>;
    vector accumulator[Chains];
    for (std::size_t a = 0; a < Chains; ++a) accumulator[a] = vector(start + 1e-3f * float(a));
    const vector factor(0.9999999f), term(1e-7f);
    for (std::size_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 16
        for (std::size_t a = 0; a < Chains; ++a) accumulator[a] = xsimd::fma(accumulator[a], factor, term);
    }
    vector total = accumulator[0];
    for (std::size_t a = 1; a < Chains; ++a) total += accumulator[a];
    return xsimd::hadd(total);
}

// fma_loop with a chain count of fma_chain_counts, chosen at run time.
inline float fma_loop(std::size_t chains, std::size_t iterations, float start)
{
    switch (chains) {
    case 8: return fma_loop<8>(iterations, start);
    case 12: return fma_loop<12>(iterations, start);
    default: return fma_loop<16>(iterations, start);
    }
}

// GFLOP/s of one timed run of fma_loop with `chains` chains.
inline double fma_trial_gflops(std::size_t iterations, std::size_t chains)
{
    static volatile float opaque = 1.0f;
    const auto start = std::chrono::steady_clock::now();
    opaque = fma_loop(chains, iterations, opaque) / float(chains * xsimd::batch<float>::size);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return fma_loop_flops(iterations, chains) / seconds / 1e9;
}

// The best GFLOP/s of one timed run of each chain count.
inline double fma_trial_gflops(std::size_t iterations)
{
    double best = 0;
    for (std::size_t i = 0; i < fma_chain_count_used; ++i) {
        best = std::max(best, fma_trial_gflops(iterations, fma_chain_counts[i]));
    }
    return best;
}

// The chain count of the fastest of three trials of each (bench_kernels'
// peak/fma runs it).
inline std::size_t fastest_fma_chains(std::size_t iterations)
{
    std::size_t best_chains = fma_chain_counts[0];
    double best = 0;
    for (int trial = 0; trial < 3; ++trial) {
        for (std::size_t i = 0; i < fma_chain_count_used; ++i) {
            const double rate = fma_trial_gflops(iterations, fma_chain_counts[i]);
            if (rate > best) best = rate, best_chains = fma_chain_counts[i];
        }
    }
    return best_chains;
}

// Iterations of fma_loop that take at least `seconds` here.
inline std::size_t fma_iterations_for(double seconds)
{
    std::size_t iterations = 1 << 12;
    // Timed with the fewest chains, the shortest run of a trial.
    while (fma_loop_flops(iterations, fma_chain_counts[0]) / (fma_trial_gflops(iterations, fma_chain_counts[0]) * 1e9) <
           seconds) {
        iterations *= 2;
    }
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
