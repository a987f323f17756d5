// Micro-benchmarks of any network's blocks and stages, registered with
// Google Benchmark (include this header only in code that links it; the
// rest of petra does not need it):
//
//   #include <benchmark/benchmark.h>
//   #include <petra/benchmark.hpp>
//
//   using net = petra::network<petra::input<1, 28, 28>, ...>;
//   int main(int argc, char** argv)
//   {
//       petra::register_block_benchmarks<net>(64);
//       petra::register_stage_benchmarks<net, petra::partition<net, 2>()>(64);
//       petra::register_stage_range_benchmarks<net>(64);
//       benchmark::Initialize(&argc, argv);
//       benchmark::RunSpecifiedBenchmarks();
//   }
//
// Per block, on random data of a batch (names "block:I/<what>", the block's
// kind and shapes in the label):
//   forward           the forward pass of training;
//   inverse           a reversible block's inverse;
//   tick              what a stage before the last spends on the block per
//                     micro-batch: forward, then reconstruct-and-backward
//                     (reversible) or recompute-and-backward (not);
//   last_stage_tick   what the last stage spends: forward, then backward from
//                     what the forward kept.
// Per stage of Cuts ("stages:S/stage:J/tick"): one micro-batch forward and backward
// through the stage alone. Per contiguous run of blocks A to B ("blocks:A-B/
// tick", or "blocks:A-B/last_stage_tick" where B is the last block): the
// same with the run as a stage. Each reports FLOP/s (counted at compile time
// from the blocks' FLOPs) and the bytes of activations it reads and writes
// per second, as rates. scripts/calibrate turns the runs' ticks into the
// partitioner's stage costs (partition.hpp, stage_range_costs): a stage
// does not cost the sum of its blocks' ticks timed one by one.
#pragma once

#include <cstddef>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include <petra/batch_view.hpp>
#include <petra/blocks/block.hpp>
#include <petra/kernels/simd.hpp>
#include <petra/network.hpp>
#include <petra/pipeline/stage.hpp>
#include <petra/random.hpp>

namespace petra {

namespace detail {

// "2x16x28x28" for halves<shape<16, 28, 28>>, "1x28x28" for shape<1, 28, 28>.
template <class Shape>
std::string shape_text()
{
    if constexpr (is_halves<Shape>::value) {
        return "2x" + shape_text<typename Shape::half>();
    } else {
        return std::to_string(Shape::channels) + "x" + std::to_string(Shape::height) + "x" +
               std::to_string(Shape::width);
    }
}

template <class T>
std::vector<T> random_values(std::size_t count, std::uint64_t seed, T low, T high)
{
    std::mt19937_64 generator(seed);
    std::vector<T> values(count);
    for (T& value : values) value = uniform_real(generator, low, high);
    return values;
}

// What one block's benchmarks hold: its parameters, a batch in and out, the
// gradients and its workspace.
template <class Network, std::size_t I, class T>
struct block_bench_data {
    using bound = typename Network::template block<I>;
    std::size_t batch;
    network_parameters<Network, T> parameters;
    std::vector<T> x, y, grad_y, grad_x, workspace, recomputed;
    kernels::aligned_vector<T> grad_parameters;

    explicit block_bench_data(std::size_t batch_size)
        : batch(batch_size), parameters(Network::template make_parameters<T>(1)),
          x(random_values<T>(batch_size * bound::input::size, 2, T(-1), T(1))), y(batch_size * bound::output::size),
          grad_y(random_values<T>(batch_size * bound::output::size, 3, T(-1), T(1))), grad_x(x.size()),
          workspace(bound::workspace_size(batch_size)), recomputed(y.size()), grad_parameters(bound::parameter_count)
    {}

    batch_view<T, typename bound::input> input() { return {x.data(), batch}; }
    batch_view<T, typename bound::output> output() { return {y.data(), batch}; }
    std::span<T, bound::parameter_count> gradient() { return std::span<T, bound::parameter_count>(grad_parameters); }

    void forward() { bound::forward(pass::training, values(), state(), input(), output(), std::span<T>(workspace)); }
    auto values() const { return parameters.template block_values<I>(); }
    auto state() { return parameters.template block_state<I>(); }
    auto read_state() const { return parameters.template block_state<I>(); }
};

inline void rate_counters(benchmark::State& state, std::size_t batch, double flops_per_example,
                          double bytes_per_example)
{
    const double examples = double(state.iterations()) * double(batch);
    state.counters["FLOPS"] = benchmark::Counter(flops_per_example * examples, benchmark::Counter::kIsRate);
    state.counters["bytes_per_second"] = benchmark::Counter(bytes_per_example * examples, benchmark::Counter::kIsRate);
    state.SetItemsProcessed(static_cast<std::int64_t>(examples));
}

} // namespace detail

// Registers the benchmarks of every block of Network (see above) for
// batches of `batch` examples of value type T.
template <class Network, class T = float>
void register_block_benchmarks(std::size_t batch)
{
    Network::for_each_block([&](auto index) {
        constexpr std::size_t I = decltype(index)::value;
        using bound = typename Network::template block<I>;
        using data = detail::block_bench_data<Network, I, T>;
        const std::string name = "block:" + std::to_string(I) + "/";
        const std::string label = std::string(bound::reversible ? "reversible " : "kept input ") +
                                  detail::shape_text<typename bound::input>() + " -> " +
                                  detail::shape_text<typename bound::output>();
        const double activation_bytes = double((bound::input::size + bound::output::size) * sizeof(T));
        const double forward = double(bound::forward_flops), backward = double(bound::backward_flops);
        auto add = [&](const std::string& what, double flops, double bytes, auto body) {
            benchmark::RegisterBenchmark((name + what).c_str(),
                                         [=](benchmark::State& state) {
                                             data values(batch);
                                             for (auto _ : state) {
                                                 body(values);
                                                 benchmark::ClobberMemory();
                                             }
                                             state.SetLabel(label);
                                             detail::rate_counters(state, batch, flops, bytes);
                                         })
                ->Unit(benchmark::kMicrosecond)
                ->UseRealTime();
        };
        add("forward", forward, activation_bytes, [](data& values) { values.forward(); });
        if constexpr (bound::reversible) {
            add("inverse", forward, activation_bytes, [](data& values) {
                bound::inverse(values.values(), values.read_state(), values.output(), values.input(),
                               std::span<T>(values.workspace));
            });
        }
        // The network's first block differentiates data: its input gradient
        // is skipped where the block allows it, as the trainers skip it.
        // (static: clang 14 refuses a local constant in the lambdas below.)
        static constexpr bool skips_input_gradient = I == 0 && input_gradient_optional<bound>();
        add("tick", 2 * forward + backward, 3 * activation_bytes, [](data& values) {
            values.forward();
            const batch_view<T, typename bound::input> grad_x =
                skips_input_gradient ? batch_view<T, typename bound::input>{}
                                     : batch_view<T, typename bound::input>(values.grad_x.data(), values.batch);
            const batch_view<const T, typename bound::output> grad_y(values.grad_y.data(), values.batch);
            if constexpr (bound::reversible) {
                reconstruct_backward<bound>(values.values(), values.read_state(), values.output(), grad_y,
                                            values.input(), grad_x, values.gradient(), std::span<T>(values.workspace));
            } else {
                recompute_backward<bound>(
                    values.values(), values.read_state(), values.input(), grad_y, grad_x, values.gradient(),
                    std::span<T>(values.workspace),
                    batch_view<T, typename bound::output>(values.recomputed.data(), values.batch));
            }
        });
        add("last_stage_tick", forward + backward, 2 * activation_bytes, [](data& values) {
            values.forward();
            bound::backward(values.values(), values.input(),
                            batch_view<const T, typename bound::output>(values.grad_y.data(), values.batch),
                            skips_input_gradient
                                ? batch_view<T, typename bound::input>{}
                                : batch_view<T, typename bound::input>(values.grad_x.data(), values.batch),
                            values.gradient(), std::span<T>(values.workspace));
        });
    });
}

namespace detail {

// Registers `name`: a micro-batch of `batch` examples forward and backward
// through stage Index of Cuts alone (its optimizer step aside), as the
// stage spends it in every tick.
template <class Network, auto Cuts, std::size_t Index, class T>
void register_stage_tick(const std::string& name, std::size_t batch)
{
    using stage_type = stage<Network, Cuts, Index, T>;
    const double flops = double(stage_type::tick_flops);
    double bytes = 0;
    for (std::size_t i = stage_type::first_block; i < stage_type::end_block; ++i) {
        bytes += double((Network::profile[i].input_values + Network::profile[i].output_values) * sizeof(T));
    }
    const std::string label =
        "blocks " + std::to_string(stage_type::first_block) + " to " + std::to_string(stage_type::end_block - 1);
    benchmark::RegisterBenchmark(name.c_str(),
                                 [=](benchmark::State& state) {
                                     auto parameters = Network::template make_parameters<T>(1);
                                     stage_type alone(parameters, {.batch = batch});
                                     auto x = random_values<T>(batch * stage_type::input_values, 2, T(-1), T(1));
                                     auto grad_y = random_values<T>(batch * stage_type::output_values, 3, T(-1), T(1));
                                     std::vector<T> y(grad_y.size()), rebuilt(x.size()), grad_x(x.size());
                                     using in = batch_view<T, typename stage_type::input>;
                                     using out = batch_view<T, typename stage_type::output>;
                                     for (auto _ : state) {
                                         alone.forward(in(x.data(), batch), out(y.data(), batch));
                                         alone.backward(out(y.data(), batch), out(grad_y.data(), batch),
                                                        in(rebuilt.data(), batch), in(grad_x.data(), batch));
                                         benchmark::ClobberMemory();
                                     }
                                     state.SetLabel(label);
                                     rate_counters(state, batch, flops, 3 * bytes);
                                 })
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
}

// Blocks [First, End) of Network as a stage of the fewest cuts that hold
// it: the pipeline's last stage when End is the network's end.
template <class Network, std::size_t First, std::size_t End, class T>
void register_stage_range(std::size_t batch)
{
    constexpr std::size_t blocks = Network::block_count;
    const std::string name = "blocks:" + std::to_string(First) + "-" + std::to_string(End - 1) +
                             (End == blocks ? "/last_stage_tick" : "/tick");
    if constexpr (First == 0 && End == blocks)
        register_stage_tick<Network, stage_cuts<1>{0, blocks}, 0, T>(name, batch);
    else if constexpr (First == 0) register_stage_tick<Network, stage_cuts<2>{0, End, blocks}, 0, T>(name, batch);
    else if constexpr (End == blocks) register_stage_tick<Network, stage_cuts<2>{0, First, blocks}, 1, T>(name, batch);
    else register_stage_tick<Network, stage_cuts<3>{0, First, End, blocks}, 1, T>(name, batch);
}

template <class Network, class T, std::size_t... Pair>
void register_stage_ranges(std::size_t batch, std::index_sequence<Pair...>)
{
    constexpr std::size_t ends = Network::block_count + 1;
    (
        [batch] {
            constexpr std::size_t first = Pair / ends, end = Pair % ends;
            if constexpr (first < end) register_stage_range<Network, first, end, T>(batch);
        }(),
        ...);
}

} // namespace detail

// Registers one benchmark per stage of Cuts ("stages:S/stage:J/tick"): a
// micro-batch of `batch` examples forward and backward through the stage
// alone (its optimizer step aside), as the stage spends it in every tick.
template <class Network, auto Cuts, class T = float>
void register_stage_benchmarks(std::size_t batch)
{
    constexpr std::size_t stages = Cuts.size() - 1;
    for_each_index<stages>([&](auto index) {
        constexpr std::size_t J = decltype(index)::value;
        detail::register_stage_tick<Network, Cuts, J, T>(
            "stages:" + std::to_string(stages) + "/stage:" + std::to_string(J) + "/tick", batch);
    });
}

// Registers one benchmark per contiguous run of Network's blocks, as a
// stage ("blocks:A-B/tick", blocks A to B as a stage before the last) or,
// where the run ends the network, as the last stage ("blocks:A-B/
// last_stage_tick"): what partition(stage_range_costs) balances. Each run
// is a stage type of its own, N(N + 1) / 2 of them for N blocks: mind the
// compile time for long networks.
template <class Network, class T = float>
void register_stage_range_benchmarks(std::size_t batch)
{
    constexpr std::size_t ends = Network::block_count + 1;
    detail::register_stage_ranges<Network, T>(batch, std::make_index_sequence<ends * ends>{});
}

} // namespace petra
