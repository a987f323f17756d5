// PETRA's pipeline on the reference network: training throughput of J
// stages on J threads, for J = 1 (one thread: reversible backprop with its
// optimizer step), 2 and 4, next to exact backprop on one thread. One
// iteration is an epoch of `micro_batches` micro-batches of 64 random images
// (fill and drain included), so examples/s is what a user gets from an epoch
// of that length. Counters: examples/s, the pipeline's own memory. Then each
// stage of the 2- and 4-stage cuts alone, to see their balance.
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
constexpr std::size_t batch = 64;
constexpr std::size_t micro_batches = 96;

struct epoch_data {
    std::vector<petra::owned_batch<float, net::input>> images;
    std::vector<std::vector<std::int32_t>> labels;

    epoch_data()
    {
        std::mt19937_64 generator(1);
        for (std::size_t m = 0; m < micro_batches; ++m) {
            images.emplace_back(batch);
            labels.emplace_back(batch);
            for (float& value : images.back()) value = petra::uniform_float(generator);
            for (auto& value : labels.back()) value = petra::uniform_int(generator, std::int32_t(0), std::int32_t(9));
        }
    }
};

const epoch_data& data()
{
    static const epoch_data instance;
    return instance;
}

double learning_rate(std::size_t) { return 0.01; }

template <std::size_t Stages>
void pipeline_epoch(benchmark::State& state)
{
    constexpr auto cuts = petra::reference_cuts<Stages>();
    auto parameters = net::make_parameters<float>(1);
    petra::thread_pipeline<net, cuts, petra::sgd<float>> pipeline(parameters, petra::sgd_options{}, learning_rate,
                                                                  {.batch = batch});
    for (auto _ : state) {
        for (std::size_t m = 0; m < micro_batches; ++m) {
            pipeline.feed(data().images[m], data().labels[m]);
        }
        benchmark::DoNotOptimize(pipeline.drain());
    }
    state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * micro_batches * batch));
    state.counters["bytes"] = double(pipeline.memory_bytes());
    state.counters["stages"] = double(Stages);
}

// One stage alone, as a user benchmarks a stage kernel: forward then backward
// of one micro-batch (what the stage does per tick, without the optimizer),
// for each stage of the 2- and 4-stage cuts. Equal times mean balanced cuts.
template <std::size_t Stages, std::size_t Index>
void stage_tick(benchmark::State& state)
{
    using stage = petra::stage<net, petra::reference_cuts<Stages>(), Index, float>;
    auto parameters = net::make_parameters<float>(1);
    stage alone(parameters, {.batch = batch});
    std::vector<float> x(batch * stage::input_values, 0.5f), y(batch * stage::output_values), grad_y(y.size(), 1e-3f),
        rebuilt(x.size()), grad_x(x.size());
    using input = petra::batch_view<float, typename stage::input>;
    using output = petra::batch_view<float, typename stage::output>;
    for (auto _ : state) {
        alone.forward(input(x.data(), batch), output(y.data(), batch));
        alone.backward(output(y.data(), batch), output(grad_y.data(), batch), input(rebuilt.data(), batch),
                       input(grad_x.data(), batch));
        benchmark::ClobberMemory();
    }
    state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * batch));
    state.counters["first_block"] = double(stage::first_block);
    state.counters["blocks"] = double(stage::block_count);
}

// The baseline: exact backprop and the same optimizer, on the caller's thread.
void exact_backprop_epoch(benchmark::State& state)
{
    auto parameters = net::make_parameters<float>(1);
    petra::exact_backprop<net, float> trainer(batch);
    petra::sgd<float> optimizer(petra::sgd_options{}, net::weight_mask<float>());
    std::vector<float> gradient(net::parameter_count);
    for (auto _ : state) {
        for (std::size_t m = 0; m < micro_batches; ++m) {
            std::fill(gradient.begin(), gradient.end(), 0.0f);
            benchmark::DoNotOptimize(
                trainer.accumulate_gradient(parameters, data().images[m], data().labels[m], gradient));
            optimizer.step(parameters.values(), gradient, 1, learning_rate(m));
        }
    }
    state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * micro_batches * batch));
    state.counters["bytes"] = double(trainer.memory_bytes());
    state.counters["stages"] = 1;
}

BENCHMARK(exact_backprop_epoch)->Name("epoch/exact_backprop/threads:1")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(pipeline_epoch<1>)->Name("epoch/petra/threads:1")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(pipeline_epoch<2>)->Name("epoch/petra/threads:2")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(pipeline_epoch<4>)->Name("epoch/petra/threads:4")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(stage_tick<2, 0>)->Name("stage/of:2/index:0")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(stage_tick<2, 1>)->Name("stage/of:2/index:1")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(stage_tick<4, 0>)->Name("stage/of:4/index:0")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(stage_tick<4, 1>)->Name("stage/of:4/index:1")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(stage_tick<4, 2>)->Name("stage/of:4/index:2")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(stage_tick<4, 3>)->Name("stage/of:4/index:3")->Unit(benchmark::kMillisecond)->UseRealTime();

} // namespace

int main(int argc, char** argv)
{
    return petra::bench::run(argc, argv, {{"micro_batches_per_epoch", std::to_string(micro_batches)}});
}
