// Every block of the reference network alone, and every stage of its 2- and
// 4-stage cuts alone, through petra/benchmark.hpp: what a user's own network
// gets from the same two calls. scripts/calibrate runs it and turns the
// blocks' tick times into the partitioner's costs.
#include <benchmark/benchmark.h>

#include <petra/benchmark.hpp>
#include <petra/petra.hpp>

#include "benchmark_main.hpp"

using net = petra::reference_network<>;

int main(int argc, char** argv)
{
    petra::register_block_benchmarks<net>(64);
    petra::register_stage_benchmarks<net, petra::reference_cuts<2>()>(64);
    petra::register_stage_benchmarks<net, petra::reference_cuts<4>()>(64);
    return petra::bench::run(argc, argv);
}
