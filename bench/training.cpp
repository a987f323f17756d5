// Training-step benchmarks of the reference network on one thread: exact
// backprop (stores activations), reversible backprop (reconstructs them) and
// inference, batch 64 (inference also 1 and 8). Counters: examples per second, the network's
// useful FLOP/s (forward + backward per example, the same count for both
// trainers, so that reconstruction shows as a lower rate) and the bytes the
// trainer holds.
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include <benchmark/benchmark.h>

#include <petra/petra.hpp>
#include <petra/random.hpp>

#include "benchmark_main.hpp"

namespace {

using net = petra::reference_network<>;

struct batch_data {
    std::vector<float> images;
    std::vector<std::int32_t> labels;

    explicit batch_data(std::size_t batch) : images(batch * net::input::size), labels(batch)
    {
        std::mt19937_64 generator(1);
        for (float& value : images) value = petra::uniform_float(generator);
        for (auto& value : labels) value = petra::uniform_int(generator, std::int32_t(0), std::int32_t(9));
    }
};

void set_counters(benchmark::State& state, std::size_t batch, double flops_per_example)
{
    state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * batch));
    state.counters["FLOPS"] =
        benchmark::Counter(flops_per_example * double(batch), benchmark::Counter::kIsIterationInvariantRate,
                           benchmark::Counter::OneK::kIs1000);
}

template <template <class, class> class Trainer>
void training_step(benchmark::State& state)
{
    const auto batch = static_cast<std::size_t>(state.range(0));
    auto parameters = net::make_parameters<float>(1);
    std::vector<float> gradient(net::parameter_count, 0.0f);
    const batch_data data(batch);
    Trainer<net, float> trainer(batch);
    for (auto _ : state) {
        benchmark::DoNotOptimize(
            trainer.accumulate_gradient(parameters, batch, data.images.data(), data.labels.data(), gradient));
        benchmark::ClobberMemory();
    }
    set_counters(state, batch, double(net::forward_flops + net::backward_flops));
    state.counters["bytes"] = double(trainer.memory_bytes());
}

void inference(benchmark::State& state)
{
    const auto batch = static_cast<std::size_t>(state.range(0));
    const auto parameters = net::make_parameters<float>(1);
    const batch_data data(batch);
    std::vector<float> logits(batch * net::output::size);
    for (auto _ : state) {
        petra::predict(parameters, batch, data.images.data(), logits.data());
        benchmark::ClobberMemory();
    }
    set_counters(state, batch, double(net::forward_flops));
}

BENCHMARK(training_step<petra::exact_backprop>)
    ->Name("training/exact_backprop")
    ->ArgName("batch")
    ->Arg(64)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(training_step<petra::reversible_backprop>)
    ->Name("training/reversible_backprop")
    ->ArgName("batch")
    ->Arg(64)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
// Batches of 1 and 8 too: what a single image waits for, where the kernels'
// work per call (the Winograd weight transforms) is not shared by 64 images.
BENCHMARK(inference)
    ->Name("training/predict")
    ->ArgName("batch")
    ->Arg(1)
    ->Arg(8)
    ->Arg(64)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

} // namespace

int main(int argc, char** argv) { return petra::bench::run(argc, argv); }
