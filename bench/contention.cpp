// Where PETRA's two stages lose time when they run together. Alone, each
// stage of the reference network at J = 2 ticks faster than it does in the
// pipeline on two cores; this program finds what the other core takes from
// it. Each stage's tick (bench/reference_ticks.hpp: the pipeline's work
// without the channels) is timed on its own core while the other core
//   - idles                        (alone),
//   - runs the other stage's ticks (together: what the pipeline does),
//   - runs an FMA loop             (what is shared if the two are hyperthreads of one core),
//   - copies 64 MiB over and over  (memory bandwidth and the shared L3),
// in rounds that take the four in turn, so that every condition sees the
// same moments of a shared machine. Prints the machine line, the cores'
// topology, and a markdown table of median tick times and their slowdown
// against alone. Run with --help for the options.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <pthread.h>
#include <sched.h>

#include "command_line.hpp"
#include "fma_peak.hpp"
#include "reference_ticks.hpp"

namespace {

using namespace petra::bench::reference;
using clock_type = std::chrono::steady_clock;

const char* const usage = R"(usage: bench_contention [--rounds N] [--ticks N]

Times each tick of PETRA's two stages (reference network, J = 2, batch 64)
on its own core while the other core idles, runs the other stage, runs FMAs
or copies memory; prints median tick times and slowdowns (markdown).

  --rounds N   rounds, each timing every stage under every condition  (5)
  --ticks N    timed ticks per stage, condition and round              (10)
  --help       this text
)";

// Pins the calling thread to one CPU; false where it cannot.
bool pin_to(unsigned cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

std::string first_line(const char* path)
{
    std::ifstream file(path);
    std::string line;
    std::getline(file, line);
    return line.empty() ? "unknown" : line;
}

// What the other core does while a stage is timed: called until `stop`.
using load = std::function<void()>;

// The other core's loads; each owns its memory, made before any timing.
struct loads {
    petra_ticks first_stage, last_stage; // one pipeline's stages each, run from their own data
    std::vector<float> from = std::vector<float>(std::size_t(16) << 20, 1.0f), to = from; // 64 MiB each

    loads()
    {
        // One whole micro-batch first, so that every buffer a tick reads holds values.
        for (petra_ticks* ticks : {&first_stage, &last_stage}) {
            ticks->first_forward();
            ticks->last_tick();
            ticks->first_backward();
        }
    }
    void stage_tick(std::size_t stage)
    {
        if (stage == 0) {
            first_stage.first_forward();
            first_stage.first_backward();
        } else {
            last_stage.last_tick();
        }
    }
    volatile float sink = 1.0f;
    void fma() { sink = petra::bench::fma_loop<12>(1 << 16, sink) / 192.0f; }
    void stream()
    {
        std::memcpy(to.data(), from.data(), from.size() * sizeof(float));
        std::swap(from, to);
    }
};

// Median milliseconds of `ticks` ticks of `stage` (on a petra_ticks of its
// own, pinned to CPU `stage`) while the other CPU runs `neighbour` (none:
// idles).
double median_tick(petra_ticks& measured, std::size_t stage, std::size_t ticks, const load& neighbour)
{
    std::atomic<bool> stop{false};
    std::thread other;
    if (neighbour) {
        other = std::thread([&] {
            pin_to(unsigned(1 - stage));
            while (!stop.load(std::memory_order_relaxed)) neighbour();
        });
    }
    std::vector<double> times;
    std::thread timed([&] {
        pin_to(unsigned(stage));
        // One untimed tick: the neighbour is running by its end.
        for (std::size_t i = 0; i <= ticks; ++i) {
            const auto start = clock_type::now();
            if (stage == 0) {
                measured.first_forward();
                measured.first_backward();
            } else {
                measured.last_tick();
            }
            if (i > 0) times.push_back(std::chrono::duration<double, std::milli>(clock_type::now() - start).count());
        }
    });
    timed.join();
    stop = true;
    if (other.joinable()) other.join();
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
}

} // namespace

int main(int argc, char** argv)
{
    std::size_t rounds = 5, ticks = 10;
    petra::bench::read_command_line(argc, argv, "bench_contention", usage,
                                    {{"--rounds", &rounds}, {"--ticks", &ticks}});
    if (std::thread::hardware_concurrency() < 2 || !pin_to(0) || !pin_to(1)) {
        std::fprintf(stderr, "bench_contention: needs two CPUs it may pin threads to\n");
        return 1;
    }

    loads other;
    petra_ticks measured[2];
    for (petra_ticks& ticks_of : measured) {
        ticks_of.first_forward();
        ticks_of.last_tick();
        ticks_of.first_backward();
    }
    const char* const conditions[] = {"alone", "together (the other stage's ticks)", "beside an FMA loop",
                                      "beside a 64 MiB copy"};
    std::vector<double> medians[2][4];
    for (std::size_t round = 0; round < rounds; ++round) {
        for (std::size_t stage = 0; stage < 2; ++stage) {
            const load neighbours[4] = {load(), [&] { other.stage_tick(1 - stage); }, [&] { other.fma(); },
                                        [&] { other.stream(); }};
            for (std::size_t c = 0; c < 4; ++c) {
                medians[stage][c].push_back(median_tick(measured[stage], stage, ticks, neighbours[c]));
            }
        }
    }

    std::printf("machine: %s, %u CPUs, %s; CPU 0's hyperthread siblings: %s, CPU 1's: %s; %zu rounds of %zu "
                "ticks per stage and condition, median over the rounds of each round's median\n\n",
                cpu_model().c_str(), std::thread::hardware_concurrency(), utc_now().c_str(),
                first_line("/sys/devices/system/cpu/cpu0/topology/thread_siblings_list").c_str(),
                first_line("/sys/devices/system/cpu/cpu1/topology/thread_siblings_list").c_str(), rounds, ticks);
    std::printf("| the other core | stage 0 tick (CPU 0) | slowdown | stage 1 tick (CPU 1) | slowdown |\n");
    std::printf("|---|---:|---:|---:|---:|\n");
    double alone[2] = {0, 0};
    for (std::size_t c = 0; c < 4; ++c) {
        std::printf("| %s |", conditions[c]);
        for (std::size_t stage = 0; stage < 2; ++stage) {
            std::vector<double>& values = medians[stage][c];
            std::sort(values.begin(), values.end());
            const double median = values[values.size() / 2];
            if (c == 0) alone[stage] = median;
            std::printf(" %.2f ms | %+.1f%% |", median, 100.0 * (median / alone[stage] - 1.0));
        }
        std::printf("\n");
    }
    return 0;
}
