// A consumer of petra::benchmark: the benchmarks of every block and of both
// stages of a small network (petra/benchmark.hpp), run briefly by Google
// Benchmark's own main loop. A consumer build proves the headers, the
// include paths and that the component brings Google Benchmark along; the
// run, that the registered benchmarks execute.
#include <benchmark/benchmark.h>

#include <petra/benchmark.hpp>
#include <petra/core.hpp>

#include <cstdio>
#include <vector>

using namespace petra;

using small_network = network<input<1, 8, 8>, stem<chain<conv2d<1, 8>, batch_norm<8>, relu>>,
                              additive_coupling<residual_function<4>>, classifier_head<8, 3>>;

int main(int argc, char** argv)
{
    register_block_benchmarks<small_network>(4);
    register_stage_benchmarks<small_network, partition<small_network, 2>()>(4);
    // Each benchmark briefly (a test, not a measurement), unless told otherwise.
    std::vector<char*> arguments(argv, argv + argc);
    char brief[] = "--benchmark_min_time=0.001";
    if (argc == 1) arguments.push_back(brief);
    int count = int(arguments.size());
    benchmark::Initialize(&count, arguments.data());
    const std::size_t ran = benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    // The stem and the head: forward, tick, last-stage tick; the coupling
    // the same and its inverse; the two stages' ticks.
    if (argc == 1 && ran != 12) {
        std::printf("consumer (benchmark): %zu benchmarks ran instead of 12\n", ran);
        return 1;
    }
    std::printf("consumer (benchmark): petra %s ran %zu benchmarks\n", PETRA_VERSION_STRING, ran);
    return 0;
}
