// Where a training step of the reference network (batch 64, one thread)
// spends its time, kernel kind by kernel kind: an exact-backprop step
// (gradient, then the optimizer) and one PETRA tick of each stage at J = 2
// (forward, loss on the last stage, reconstruction and backward, the
// optimizer on the stage's slice). Built with the kernels' profiling hooks
// (PETRA_PROFILE_KERNELS, kernels/profile.hpp), so it times every kernel
// call; the step's wall time minus the kernels' total is reported as
// "outside kernels" (copies between blocks, the per-channel scalar work of
// batch norm, calls), so that nothing is hidden.
//
// Prints markdown: the machine line with the core's FMA peak measured here
// (bench/fma_peak.hpp), then per step or tick a table of kinds (calls, ms,
// share, GFLOP/s, GB/s, % of peak) and, for the exact-backprop step, every
// kernel geometry. Run with --help for the options.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <xsimd/xsimd.hpp>

#include <petra/petra.hpp>

#include "command_line.hpp"
#include "fma_peak.hpp"
#include "reference_ticks.hpp"

static_assert(petra::kernels::profile::enabled, "bench_breakdown is built with PETRA_PROFILE_KERNELS defined.");

namespace {

namespace profile = petra::kernels::profile;
using namespace petra::bench::reference;
using clock_type = std::chrono::steady_clock;

const char* const usage = R"(usage: bench_breakdown [--steps N] [--warmup N] [--precision=fp32|bf16] [--network-flops]

Times every kernel call of exact-backprop steps and of PETRA ticks (J = 2)
of the reference network, batch 64, on one thread, and prints markdown
tables: per kernel kind and per kernel geometry, calls, ms, share of the
step, GFLOP/s, GB/s and % of the core's FMA peak (measured between
the steps).

  --steps N         timed steps (and ticks) after the warm-up      (20)
  --warmup N        untimed steps first                            (3)
  --precision=P     fp32 or bf16: what the steps' products are computed
                    in (layers/precision.hpp; bf16 needs AMX or
                    AVX512-BF16)                                    (fp32)
  --network-flops   print the network's FLOPs per example as one JSON
                    line and exit (scripts/peer reads it)
  --help            this text
)";

// What the timed steps of one kind of step did: their wall time and every
// kernel call inside it.
struct measurement {
    measurement(std::string what, double flops_per_step) : name(std::move(what)), useful_flops(flops_per_step) {}

    std::string name;
    // Per step, counted at compile time: forward and backward for exact
    // backprop; forward, reconstruction and backward for a PETRA tick.
    double useful_flops;
    std::size_t steps = 0;
    double nanoseconds = 0;
    profile::table kernels;

    // Runs work, adding its wall time and kernel calls; counts a step if
    // ends_step (a stage's tick is measured in two parts).
    template <class Work>
    void run(Work&& work, bool ends_step = true)
    {
        profile::this_thread().clear();
        const auto start = clock_type::now();
        work();
        nanoseconds += double(std::chrono::duration_cast<std::chrono::nanoseconds>(clock_type::now() - start).count());
        kernels.add(profile::this_thread());
        if (ends_step) ++steps;
    }
};

// The row of the kinds table a record belongs to. Kernels know no layers;
// here, for the reference network, geometries map one to one onto layer
// kinds: the stem is the one convolution with a single input channel.
std::string kind_of(const profile::record& record)
{
    const std::string kind = record.kind;
    if (kind.rfind("convolution ", 0) == 0) {
        const std::size_t kernel = record.sizes[0], stride = record.sizes[2], in_channels = record.sizes[3];
        const std::string pass = kind.substr(std::strlen("convolution "));
        char label[96];
        if (in_channels == 1) {
            std::snprintf(label, sizeof label, "stem conv %zux%zu s%zu, %s", kernel, kernel, stride, pass.c_str());
        } else {
            std::snprintf(label, sizeof label, "conv %zux%zu s%zu, %s", kernel, kernel, stride, pass.c_str());
        }
        return label;
    }
    static const std::map<std::string, std::string> names = {
        {"channel_mean_variance", "batch norm statistics (channel_mean_variance)"},
        {"channel_affine", "batch norm affine (channel_affine)"},
        {"channel_gradient_sums", "batch norm gradient sums (channel_gradient_sums)"},
        {"channel_combination", "batch norm input gradient (channel_combination)"},
        {"relu_forward", "ReLU forward"},
        {"relu_backward", "ReLU backward"},
        {"add", "additions (couplings, downsampling)"},
        {"subtract", "subtractions (coupling inverses)"},
        {"channel_sum", "global average pool (channel_sum)"},
        {"softmax_cross_entropy", "softmax cross-entropy"},
        {"sgd_update", "optimizer (sgd_update)"},
    };
    const auto found = names.find(kind);
    if (found != names.end()) return found->second;
    if (kind.rfind("gemm", 0) == 0) return "dense layer (" + kind + ")";
    return kind;
}

struct row {
    std::string label;
    std::string geometry;
    double calls = 0, nanoseconds = 0, flops = 0, bytes = 0;
};

void print_rows(std::vector<row> rows, const measurement& m, double peak_gflops, bool with_geometry)
{
    std::sort(rows.begin(), rows.end(), [](const row& a, const row& b) { return a.nanoseconds > b.nanoseconds; });
    const double steps = double(m.steps);
    const double step_ns = m.nanoseconds / steps;
    auto print = [&](const std::string& label, const std::string& geometry, double calls, double ns, double flops,
                     double bytes) {
        // Per step: ns / steps; rates from totals.
        const double gflops = ns > 0 ? flops / ns : 0, gbytes = ns > 0 ? bytes / ns : 0;
        std::printf("| %s |", label.c_str());
        if (with_geometry) std::printf(" %s |", geometry.c_str());
        if (calls > 0) {
            std::printf(" %.0f |", calls / steps);
        } else {
            std::printf(" - |");
        }
        std::printf(" %.2f | %.1f%% | ", ns / steps / 1e6, 100.0 * ns / steps / step_ns);
        if (flops > 0) {
            std::printf("%.1f | ", gflops);
        } else {
            std::printf("- | ");
        }
        if (bytes > 0) {
            std::printf("%.1f | ", gbytes);
        } else {
            std::printf("- | ");
        }
        if (flops > 0) {
            std::printf("%.1f%% |\n", 100.0 * gflops / peak_gflops);
        } else {
            std::printf("- |\n");
        }
    };
    if (with_geometry) {
        std::printf("| kernel | geometry | calls per step | ms per step | share of step | GFLOP/s | GB/s "
                    "| %% of FMA peak |\n");
        std::printf("|---|---|---:|---:|---:|---:|---:|---:|\n");
    } else {
        std::printf("| kind | calls per step | ms per step | share of step | GFLOP/s | GB/s | %% of FMA peak |\n");
        std::printf("|---|---:|---:|---:|---:|---:|---:|\n");
    }
    row all{"all kernels", ""};
    for (const row& r : rows) {
        print(r.label, r.geometry, r.calls, r.nanoseconds, r.flops, r.bytes);
        all.calls += r.calls;
        all.nanoseconds += r.nanoseconds;
        all.flops += r.flops;
        all.bytes += r.bytes;
    }
    print("**all kernels**", "", all.calls, all.nanoseconds, all.flops, all.bytes);
    print("**outside kernels** (copies, per-channel scalars, calls)", "", 0, m.nanoseconds - all.nanoseconds, 0, 0);
    // The whole step at the FLOPs counted at compile time (for exact
    // backprop: net::forward_flops + net::backward_flops per example), the
    // figure the speed targets are stated in.
    const double useful_gflops = m.useful_flops / step_ns;
    std::printf("| **whole step**, %.1f MFLOP (compile-time count) |%s %.0f | %.2f | 100%% | %.1f | - | %.1f%% |\n",
                m.useful_flops / 1e6, with_geometry ? " |" : "", all.calls / steps, step_ns / 1e6, useful_gflops,
                100.0 * useful_gflops / peak_gflops);
    std::printf("\n");
}

void print_kinds(const measurement& m, double peak_gflops)
{
    std::vector<row> rows;
    for (const profile::record& record : m.kernels.records()) {
        const std::string label = kind_of(record);
        auto found = std::find_if(rows.begin(), rows.end(), [&](const row& r) { return r.label == label; });
        if (found == rows.end()) {
            rows.push_back(row{label, ""});
            found = rows.end() - 1;
        }
        found->calls += double(record.calls);
        found->nanoseconds += double(record.nanoseconds);
        found->flops += record.flops;
        found->bytes += record.bytes;
    }
    std::printf("%s: %zu steps, %.2f ms per step, %.0f examples/s\n\n", m.name.c_str(), m.steps,
                m.nanoseconds / double(m.steps) / 1e6, double(batch) * double(m.steps) / (m.nanoseconds / 1e9));
    print_rows(std::move(rows), m, peak_gflops, false);
}

void print_geometries(const measurement& m, double peak_gflops)
{
    std::vector<row> rows;
    for (const profile::record& record : m.kernels.records()) {
        rows.push_back(row{record.kind, record.geometry(), double(record.calls), double(record.nanoseconds),
                           record.flops, record.bytes});
    }
    std::printf("%s, every kernel geometry:\n\n", m.name.c_str());
    print_rows(std::move(rows), m, peak_gflops, true);
}

} // namespace

int main(int argc, char** argv)
{
    std::size_t steps = 20, warmup = 3;
    petra::precision arithmetic = petra::precision::fp32;
    petra::bench::read_command_line(argc, argv, "bench_breakdown", usage, {{"--steps", &steps}, {"--warmup", &warmup}},
                                    [&](const std::string& name) {
                                        if (name.starts_with("--precision=")) {
                                            arithmetic = petra::parse_precision(name.substr(12));
                                            petra::require_precision(arithmetic);
                                            return true;
                                        }
                                        if (name != "--network-flops") return false;
                                        std::printf("{\"forward_flops\": %zu, \"backward_flops\": %zu}\n",
                                                    std::size_t(net::forward_flops), std::size_t(net::backward_flops));
                                        std::exit(0);
                                    });

    // Everything interleaved, step by step, so that every figure (and the
    // FMA peak they are divided by) sees the same moments of a shared
    // machine: an FMA trial, an exact-backprop step, a tick of each stage.
    auto exact_step = std::make_unique<exact_backprop_step>(arithmetic);
    auto ticks = std::make_unique<petra_ticks>(arithmetic);
    measurement exact("exact backprop step (gradient and optimizer)", exact_backprop_step::useful_flops());
    measurement first_tick(petra_ticks::name<petra_ticks::first>(), stage_tick_flops<petra_ticks::first>());
    measurement last_tick(petra_ticks::name<petra_ticks::last>(), stage_tick_flops<petra_ticks::last>());
    const std::size_t fma_iterations = petra::bench::fma_iterations_for(0.03);
    std::vector<double> peaks;
    for (std::size_t i = 0; i < warmup + steps; ++i) {
        const bool timed = i >= warmup;
        if (timed) peaks.push_back(petra::bench::fma_trial_gflops(fma_iterations));
        auto run = [&](measurement& m, auto&& work, bool ends_step = true) {
            if (timed) {
                m.run(work, ends_step);
            } else {
                work();
            }
        };
        run(exact, [&] { (*exact_step)(); });
        run(
            first_tick, [&] { ticks->first_forward(); }, false);
        run(last_tick, [&] { ticks->last_tick(); });
        run(first_tick, [&] { ticks->first_backward(); });
    }
    std::sort(peaks.begin(), peaks.end());
    const double peak_gflops = peaks[peaks.size() / 2];

    std::printf("machine: %s, %u cores, %s; simd %s; FMA peak of one core %.1f GFLOP/s (median of %zu trials "
                "interleaved with the steps, %.1f to %.1f; bench/fma_peak.hpp); reference network, batch %zu, one "
                "thread, precision %s; each figure is a total over %zu timed steps (after %zu warm-up) divided by "
                "the steps\n\n",
                cpu_model().c_str(), std::thread::hardware_concurrency(), utc_now().c_str(),
                xsimd::default_arch::name(), peak_gflops, peaks.size(), peaks.front(), peaks.back(), batch,
                petra::precision_name(arithmetic), steps, warmup);
    print_kinds(exact, peak_gflops);
    print_kinds(first_tick, peak_gflops);
    print_kinds(last_tick, peak_gflops);
    print_geometries(exact, peak_gflops);
    return 0;
}
