// Every block of the reference network alone, every stage of its 2- and
// 4-stage cuts alone, and every run of its blocks as a stage, through
// petra/benchmark.hpp: what a user's own network gets from the same three
// calls. scripts/calibrate runs the runs ("blocks:") and turns their ticks
// into the partitioner's stage costs.
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
    petra::register_stage_range_benchmarks<net>(64);
    return petra::bench::run(argc, argv);
}
