// The main of every petra benchmark binary: records the SIMD architecture
// the kernels were compiled for (and any extra facts) in the report's
// context, then runs the benchmarks Google Benchmark's options select.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <benchmark/benchmark.h>
#include <xsimd/xsimd.hpp>

namespace petra::bench {

inline int run(int argc, char** argv, const std::vector<std::pair<std::string, std::string>>& context = {})
{
    benchmark::AddCustomContext("petra_simd", xsimd::default_arch::name());
    for (const auto& [key, value] : context) benchmark::AddCustomContext(key, value);
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}

} // namespace petra::bench
