// Kernel benchmarks: the core's FMA peak (the denominator of every "% of
// peak") and what it streams from working sets of each size (bytes/s),
// petra's GEMM next to OpenBLAS's cblas_sgemm (one thread) on square sizes
// and on the GEMM shapes of the reference network's convolutions (and
// petra's bf16 GEMM there, on each engine the CPU offers), and the
// three convolution kernels on the reference network's layers (batch 64),
// the couplings' also in the direct form where the library takes
// Winograd's, and a batch normalisation's backward passes behind a ReLU
// with their input in cache and out of it. Every benchmark but the
// streaming and the batch-norm ones reports FLOP/s as a counter.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <benchmark/benchmark.h>
#include <cblas.h>
#include <xsimd/xsimd.hpp>

#include <petra/kernels/bf16.hpp>
#include <petra/kernels/convolution.hpp>
#include <petra/kernels/convolution_bf16.hpp>
#include <petra/kernels/gemm.hpp>
#include <petra/kernels/normalization.hpp>
#include <petra/random.hpp>

extern "C" char* openblas_get_corename();

#include "benchmark_main.hpp"
#include "fma_peak.hpp"

namespace {

using petra::kernels::convolution_shape;
using petra::kernels::transpose;

// The kernels' operands in buffers aligned as the library aligns its own
// (kernels/simd.hpp, buffer_alignment): a std::vector's storage lies 16
// bytes off a cache line, and a forward pass over 32x32 planes of 16
// channels ran about 1.1 times faster with its operands aligned (Zen 5).
using buffer = petra::kernels::aligned_vector<float>;

buffer random_values(std::size_t count, unsigned seed)
{
    std::mt19937_64 generator(seed);
    buffer values(count);
    for (float& value : values) value = petra::uniform_real(generator, -1.0f, 1.0f);
    return values;
}

void set_flops(benchmark::State& state, double flops_per_iteration)
{
    state.counters["FLOPS"] = benchmark::Counter(flops_per_iteration, benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::OneK::kIs1000);
}

// The FMA peak of one core: independent vector FMAs, as many chains as run
// fastest here (bench/fma_peak.hpp).
void fma_peak(benchmark::State& state)
{
    constexpr std::size_t iterations = 1 << 16;
    const std::size_t chains = petra::bench::fastest_fma_chains(iterations);
    float start = 1.0f;
    for (auto _ : state) {
        benchmark::DoNotOptimize(start);
        benchmark::DoNotOptimize(petra::bench::fma_loop(chains, iterations, start));
    }
    set_flops(state, petra::bench::fma_loop_flops(iterations, chains));
    state.counters["accumulators"] = double(chains);
    state.counters["lanes"] = double(xsimd::batch<float>::size);
}

BENCHMARK(fma_peak)->Name("peak/fma")->Unit(benchmark::kMicrosecond);

// What one core streams from the level of the memory hierarchy that holds a
// working set of `KiB` kibibytes, the other denominator of the kernels: the
// memory-bound passes (batch normalisation, additions) and the
// convolutions' transposes move data at this rate once their arrays outgrow
// L2. read: the buffer summed on four vector accumulators (enough to keep
// the loads, not the additions, the limit); copy: 2x of one buffer into
// another of the same size, as the passes do (bytes counted once per
// array). Every repetition walks the whole buffer after the first, so the
// buffer is where its size puts it.
template <bool Copy>
void memory_bandwidth(benchmark::State& state)
{
    using vector = xsimd::batch<float>;
    constexpr std::size_t width = vector::size;
    const std::size_t count =
        std::size_t(state.range(0)) * 1024 / sizeof(float) / (Copy ? 2 : 1) / (4 * width) * (4 * width);
    buffer source = random_values(count, 7), target(Copy ? count : 0);
    for (auto _ : state) {
        if constexpr (Copy) {
            for (std::size_t i = 0; i < count; i += width)
                (vector::load_unaligned(source.data() + i) * vector(2.0f)).store_unaligned(target.data() + i);
            benchmark::ClobberMemory();
        } else {
            vector sums[4] = {vector(0.0f), vector(0.0f), vector(0.0f), vector(0.0f)};
            for (std::size_t i = 0; i < count; i += 4 * width) {
                for (std::size_t k = 0; k < 4; ++k) sums[k] += vector::load_unaligned(source.data() + i + k * width);
            }
            float total = xsimd::hadd((sums[0] + sums[1]) + (sums[2] + sums[3]));
            benchmark::DoNotOptimize(total);
        }
    }
    state.SetBytesProcessed(std::int64_t(state.iterations()) * std::int64_t(count * sizeof(float) * (Copy ? 2 : 1)));
}

void memory_sizes(benchmark::internal::Benchmark* benchmark)
{
    benchmark->ArgName("KiB");
    for (long kib : {1024, 2048, 4096, 16384, 65536, 262144}) benchmark->Arg(kib);
}

BENCHMARK(memory_bandwidth<false>)->Name("peak/read")->Apply(memory_sizes)->Unit(benchmark::kMicrosecond);
BENCHMARK(memory_bandwidth<true>)->Name("peak/copy")->Apply(memory_sizes)->Unit(benchmark::kMicrosecond);

// C (m x n) = A (m x k) * B (k x n), row-major, no transposition: petra's
// float GEMM, OpenBLAS's, or petra's bf16 GEMM (A and B rounded to bf16 as
// they are packed, float sums) on one engine.
enum class gemm_by { petra, openblas, bf16_avx512, bf16_amx };

template <gemm_by By>
void gemm_benchmark(benchmark::State& state)
{
    const auto m = static_cast<std::size_t>(state.range(0));
    const auto n = static_cast<std::size_t>(state.range(1));
    const auto k = static_cast<std::size_t>(state.range(2));
    const auto a = random_values(m * k, 1), b = random_values(k * n, 2);
    buffer c(m * n);
    const petra::kernels::gemm_arguments<float> arguments{.op_a = transpose::no,
                                                          .op_b = transpose::no,
                                                          .m = m,
                                                          .n = n,
                                                          .k = k,
                                                          .alpha = 1.0f,
                                                          .a = a.data(),
                                                          .lda = k,
                                                          .b = b.data(),
                                                          .ldb = n,
                                                          .beta = 0.0f,
                                                          .c = c.data(),
                                                          .ldc = n};
    const auto& bf16 = petra::kernels::bf16_support();
    if ((By == gemm_by::bf16_avx512 && !bf16.avx512_bf16) || (By == gemm_by::bf16_amx && !bf16.amx)) {
        state.SkipWithError("this CPU does not offer the engine's instruction");
        return;
    }
    for (auto _ : state) {
        if constexpr (By == gemm_by::openblas) {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(m), int(n), int(k), 1.0f, a.data(), int(k),
                        b.data(), int(n), 0.0f, c.data(), int(n));
        } else if constexpr (By == gemm_by::petra) {
            petra::kernels::gemm<float>(arguments);
        } else {
            petra::kernels::gemm_bf16(arguments, By == gemm_by::bf16_amx ? petra::kernels::bf16_engine::amx
                                                                         : petra::kernels::bf16_engine::avx512_bf16);
        }
        benchmark::DoNotOptimize(c.data());
        benchmark::ClobberMemory();
    }
    set_flops(state, 2.0 * double(m) * double(n) * double(k));
}

// gemm/bf16_amx's products alone: op(A) and op(B) rounded and packed once,
// before the timing, so that what is left is the tile kernel and C's
// stores; the difference from gemm/bf16_amx is the rounding and packing of
// float operands, which a bf16 path that keeps its activations in bf16
// would not pay on every product.
void gemm_bf16_prepacked(benchmark::State& state)
{
#if defined(PETRA_BF16_X86)
    namespace detail = petra::kernels::detail;
    using packing = detail::bf16_packing;
    const auto m = static_cast<std::size_t>(state.range(0));
    const auto n = static_cast<std::size_t>(state.range(1));
    const auto k = static_cast<std::size_t>(state.range(2));
    if (!petra::kernels::bf16_support().amx) {
        state.SkipWithError("this CPU does not offer AMX-BF16");
        return;
    }
    const auto a = random_values(m * k, 1), b = random_values(k * n, 2);
    const std::size_t k_pad = packing::round_up(k, packing::depth_multiple);
    petra::kernels::aligned_vector<std::uint16_t> packed_a(packing::packed_a_count(m, k));
    petra::kernels::aligned_vector<std::uint16_t> packed_b(packing::round_up(n, packing::column_multiple) * k_pad);
    detail::pack_a_bf16_rows(a.data(), k, m, k, packed_a.data());
    detail::pack_b_bf16_rows(b.data(), n, k, 0, n, packed_b.data());
    buffer c(m * n);
    for (auto _ : state) {
        detail::bf16_block_amx(m, k, packed_a.data(), packed_b.data(), n, 1.0f, 0.0f, c.data(), n);
        benchmark::DoNotOptimize(c.data());
        benchmark::ClobberMemory();
    }
    set_flops(state, 2.0 * double(m) * double(n) * double(k));
#else
    state.SkipWithError("no AMX on this architecture");
#endif
}

void gemm_shapes(benchmark::internal::Benchmark* benchmark)
{
    benchmark->ArgNames({"m", "n", "k"});
    for (long size : {64, 128, 256, 512, 1024}) benchmark->Args({size, size, size});
    // The forward convolutions of the reference network as GEMMs, batch 64:
    // m = output channels, n = 64 * output pixels, k = input channels * 9.
    benchmark->Args({16, 64 * 28 * 28, 16 * 9});
    benchmark->Args({32, 64 * 14 * 14, 32 * 9});
    benchmark->Args({64, 64 * 7 * 7, 64 * 9});
}

BENCHMARK(gemm_benchmark<gemm_by::petra>)->Name("gemm/petra")->Apply(gemm_shapes)->Unit(benchmark::kMicrosecond);
BENCHMARK(gemm_benchmark<gemm_by::openblas>)->Name("gemm/openblas")->Apply(gemm_shapes)->Unit(benchmark::kMicrosecond);
BENCHMARK(gemm_benchmark<gemm_by::bf16_avx512>)
    ->Name("gemm/bf16_avx512")
    ->Apply(gemm_shapes)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(gemm_benchmark<gemm_by::bf16_amx>)->Name("gemm/bf16_amx")->Apply(gemm_shapes)->Unit(benchmark::kMicrosecond);
BENCHMARK(gemm_bf16_prepacked)->Name("gemm/bf16_amx_prepacked")->Apply(gemm_shapes)->Unit(benchmark::kMicrosecond);

enum class pass { forward, backward_input, backward_weights };

// A convolution benchmark's shape, batch 64, from its arguments (cin,
// cout, size, kernel, stride), with the padding that keeps a 3x3's size.
convolution_shape benchmark_shape(const benchmark::State& state)
{
    return {64,
            static_cast<std::size_t>(state.range(0)),
            static_cast<std::size_t>(state.range(2)),
            static_cast<std::size_t>(state.range(2)),
            static_cast<std::size_t>(state.range(1)),
            static_cast<std::size_t>(state.range(3)),
            static_cast<std::size_t>(state.range(4)),
            static_cast<std::size_t>(state.range(3) / 2)};
}

// Which kernels a convolution benchmark runs: the library's (Winograd's
// form where it applies), the direct form even where the library takes
// Winograd's (kernels/winograd.hpp), Winograd's form even where the library
// takes the direct one (3x3 stride-1 shapes with padding 1), to compare the
// two, or the bf16 kernels on the best engine the CPU offers
// (kernels/convolution_bf16.hpp: AMX tiles, else vdpbf16ps).
enum class kernels_of { library, direct, winograd, bf16 };

template <pass Pass, kernels_of Kernels = kernels_of::library>
void convolution_benchmark(benchmark::State& state)
{
    const auto& bf16_offered = petra::kernels::bf16_support();
    if (Kernels == kernels_of::bf16 && !bf16_offered.amx && !bf16_offered.avx512_bf16) {
        state.SkipWithError("this CPU offers neither AMX-BF16 nor AVX512-BF16");
        return;
    }
    const convolution_shape shape = benchmark_shape(state);
    const auto input = random_values(shape.input_count(), 3);
    const auto weights = random_values(shape.weight_count(), 4);
    const auto grad_y = random_values(shape.output_count(), 5);
    buffer output(shape.output_count()), grad_x(shape.input_count()), grad_weights(shape.weight_count());
    petra::kernels::scratch_source scratch;
    namespace kernels = petra::kernels;
    namespace detail = petra::kernels::detail;
    constexpr bool direct = Kernels == kernels_of::direct, bf16 = Kernels == kernels_of::bf16;
    constexpr bool winograd = Kernels == kernels_of::winograd;
    for (auto _ : state) {
        if constexpr (Pass == pass::forward) {
            if constexpr (direct) {
                detail::forward_accumulate(shape, input.data(), weights.data(), output.data(), 0.0f, scratch);
            } else if constexpr (winograd) {
                detail::winograd_forward(shape, input.data(), weights.data(), output.data(), 0.0f, scratch);
            } else if constexpr (bf16) {
                kernels::convolution_forward_bf16(shape, input.data(), weights.data(), output.data());
            } else {
                kernels::convolution_forward(shape, input.data(), weights.data(), output.data());
            }
            benchmark::DoNotOptimize(output.data());
        } else if constexpr (Pass == pass::backward_input) {
            if constexpr (direct) {
                detail::backward_input_by_phases(shape, grad_y.data(), weights.data(), grad_x.data(), 0.0f, scratch);
            } else if constexpr (winograd) {
                detail::winograd_backward_input(shape, grad_y.data(), weights.data(), grad_x.data(), 0.0f, scratch);
            } else if constexpr (bf16) {
                kernels::convolution_backward_input_bf16(shape, grad_y.data(), weights.data(), grad_x.data());
            } else {
                kernels::convolution_backward_input(shape, grad_y.data(), weights.data(), grad_x.data());
            }
            benchmark::DoNotOptimize(grad_x.data());
        } else {
            if constexpr (direct) {
                std::fill(grad_weights.begin(), grad_weights.end(), 0.0f);
                detail::weight_gradient(shape, input.data(), grad_y.data(), grad_weights.data(), scratch);
            } else if constexpr (winograd) {
                std::fill(grad_weights.begin(), grad_weights.end(), 0.0f);
                detail::winograd_weight_gradient(detail::forward_winograd_geometry<float>(shape), input.data(),
                                                 grad_y.data(), grad_weights.data(), scratch);
            } else if constexpr (bf16) {
                kernels::convolution_backward_weights_bf16(shape, input.data(), grad_y.data(), grad_weights.data());
            } else {
                kernels::convolution_backward_weights(shape, input.data(), grad_y.data(), grad_weights.data());
            }
            benchmark::DoNotOptimize(grad_weights.data());
        }
        benchmark::ClobberMemory();
    }
    set_flops(state, double(shape.flops()));
}

// The convolutions of the reference network (width 16), batch 64.
void convolution_shapes(benchmark::internal::Benchmark* benchmark)
{
    benchmark->ArgNames({"cin", "cout", "size", "kernel", "stride"});
    benchmark->Args({16, 16, 28, 3, 1}); // couplings at 28x28
    benchmark->Args({32, 32, 14, 3, 1}); // couplings at 14x14
    benchmark->Args({64, 64, 7, 3, 1});  // couplings at 7x7
    benchmark->Args({16, 32, 28, 3, 2}); // downsampling 28 -> 14
    benchmark->Args({16, 32, 28, 1, 2});
    benchmark->Args({32, 64, 14, 3, 2}); // downsampling 14 -> 7
    benchmark->Args({32, 64, 14, 1, 2});
    benchmark->Args({1, 32, 28, 3, 1}); // stem
}

// The couplings' shapes, which take Winograd's form, in the direct one.
void winograd_shapes(benchmark::internal::Benchmark* benchmark)
{
    benchmark->ArgNames({"cin", "cout", "size", "kernel", "stride"});
    benchmark->Args({16, 16, 28, 3, 1});
    benchmark->Args({32, 32, 14, 3, 1});
    benchmark->Args({64, 64, 7, 3, 1});
}

// Narrow channels, in both forms: what chose detail::winograd_applies'
// bound on the input channels (8 of them fill half an AVX-512 vector).
void narrow_shapes(benchmark::internal::Benchmark* benchmark)
{
    benchmark->ArgNames({"cin", "cout", "size", "kernel", "stride"});
    for (const int size : {7, 14, 28, 56}) benchmark->Args({8, 8, size, 3, 1});
    for (const int out : {12, 16, 24}) benchmark->Args({8, out, 28, 3, 1});
    for (const int in : {12, 16, 24}) benchmark->Args({in, 8, 28, 3, 1});
    benchmark->Args({12, 12, 28, 3, 1});
}

BENCHMARK(convolution_benchmark<pass::forward, kernels_of::direct>)
    ->Name("convolution_narrow_direct/forward")
    ->Apply(narrow_shapes)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(convolution_benchmark<pass::backward_input, kernels_of::direct>)
    ->Name("convolution_narrow_direct/backward_input")
    ->Apply(narrow_shapes)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(convolution_benchmark<pass::backward_weights, kernels_of::direct>)
    ->Name("convolution_narrow_direct/backward_weights")
    ->Apply(narrow_shapes)
    ->Unit(benchmark::kMicrosecond);
// The form the library chooses for the narrow weight gradients (at most 8
// output channels: the dot products along the pixels), against the two above.
BENCHMARK(convolution_benchmark<pass::backward_weights>)
    ->Name("convolution_narrow/backward_weights")
    ->Apply(narrow_shapes)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(convolution_benchmark<pass::forward, kernels_of::winograd>)
    ->Name("convolution_narrow_winograd/forward")
    ->Apply(narrow_shapes)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(convolution_benchmark<pass::backward_input, kernels_of::winograd>)
    ->Name("convolution_narrow_winograd/backward_input")
    ->Apply(narrow_shapes)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(convolution_benchmark<pass::backward_weights, kernels_of::winograd>)
    ->Name("convolution_narrow_winograd/backward_weights")
    ->Apply(narrow_shapes)
    ->Unit(benchmark::kMicrosecond);

BENCHMARK(convolution_benchmark<pass::forward, kernels_of::direct>)
    ->Name("convolution_direct/forward")
    ->Apply(winograd_shapes)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(convolution_benchmark<pass::backward_input, kernels_of::direct>)
    ->Name("convolution_direct/backward_input")
    ->Apply(winograd_shapes)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(convolution_benchmark<pass::backward_weights, kernels_of::direct>)
    ->Name("convolution_direct/backward_weights")
    ->Apply(winograd_shapes)
    ->Unit(benchmark::kMicrosecond);

BENCHMARK(convolution_benchmark<pass::forward>)
    ->Name("convolution/forward")
    ->Apply(convolution_shapes)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(convolution_benchmark<pass::backward_input>)
    ->Name("convolution/backward_input")
    ->Apply(convolution_shapes)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(convolution_benchmark<pass::backward_weights>)
    ->Name("convolution/backward_weights")
    ->Apply(convolution_shapes)
    ->Unit(benchmark::kMicrosecond);

BENCHMARK(convolution_benchmark<pass::forward, kernels_of::bf16>)
    ->Name("convolution_bf16/forward")
    ->Apply(convolution_shapes)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(convolution_benchmark<pass::backward_input, kernels_of::bf16>)
    ->Name("convolution_bf16/backward_input")
    ->Apply(convolution_shapes)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(convolution_benchmark<pass::backward_weights, kernels_of::bf16>)
    ->Name("convolution_bf16/backward_weights")
    ->Apply(convolution_shapes)
    ->Unit(benchmark::kMicrosecond);

// A batch normalisation's backward passes behind a ReLU on the reference
// network's shapes (batch 64): the gated gradient sums (the output gradient
// and the batch norm's input x read) and the combination (both read, the
// input gradient written). x_cold:0 leaves every array where the last
// iteration put it; x_cold:1 first walks a 64 MiB buffer (twice the largest
// L3 met, outside the timing) and then reads the output gradient back, as a
// step finds them: the gradient just written by the convolution after the
// batch norm, x written in the forward pass and long out of the caches.
enum class channel_pass { relu_gradient_sums, relu_combination };

template <channel_pass Pass>
void channel_backward_benchmark(benchmark::State& state)
{
    constexpr std::size_t batch = 64;
    const auto channels = std::size_t(state.range(0)), positions = std::size_t(state.range(1));
    const bool x_cold = state.range(2) != 0;
    const std::size_t count = batch * channels * positions;
    const auto grad_y = random_values(count, 3), x = random_values(count, 4);
    const auto scale = random_values(channels, 5), shift = random_values(channels, 6);
    const auto mean = random_values(channels, 7), coefficients = random_values(3 * channels, 8);
    buffer grad_x(count), sums(2 * channels);
    buffer eviction(x_cold ? (std::size_t(64) << 20) / sizeof(float) : 0);
    for (auto _ : state) {
        if (x_cold) {
            state.PauseTiming();
            for (std::size_t i = 0; i < eviction.size(); i += 16) eviction[i] += 1.0f;
            float total = 0.0f;
            for (std::size_t i = 0; i < count; i += 16) total += grad_y[i];
            benchmark::DoNotOptimize(total);
            benchmark::ClobberMemory();
            state.ResumeTiming();
        }
        if constexpr (Pass == channel_pass::relu_gradient_sums) {
            petra::kernels::channel_relu_gradient_sums<float>({.batch = batch,
                                                               .channels = channels,
                                                               .positions = positions,
                                                               .grad_y = grad_y.data(),
                                                               .x = x.data(),
                                                               .mean = mean.data(),
                                                               .scale = scale.data(),
                                                               .shift = shift.data(),
                                                               .sum_grad_y = sums.data(),
                                                               .sum_grad_y_deviation = sums.data() + channels});
        } else {
            petra::kernels::channel_relu_combination<float>({.batch = batch,
                                                             .channels = channels,
                                                             .positions = positions,
                                                             .grad_y = grad_y.data(),
                                                             .x = x.data(),
                                                             .scale = scale.data(),
                                                             .shift = shift.data(),
                                                             .grad_y_coefficient = coefficients.data(),
                                                             .x_coefficient = coefficients.data() + channels,
                                                             .offset = coefficients.data() + 2 * channels,
                                                             .grad_x = grad_x.data()});
        }
        benchmark::ClobberMemory();
    }
    const std::size_t arrays = Pass == channel_pass::relu_gradient_sums ? 2 : 3;
    state.SetBytesProcessed(std::int64_t(state.iterations()) * std::int64_t(arrays * count * sizeof(float)));
}

void channel_shapes(benchmark::internal::Benchmark* benchmark)
{
    benchmark->ArgNames({"channels", "positions", "x_cold"});
    for (long x_cold : {0, 1}) {
        for (const auto& [channels, positions] : {std::pair<long, long>{16, 784}, {32, 784}, {32, 196}, {64, 49}}) {
            benchmark->Args({channels, positions, x_cold});
        }
    }
    // A fixed count: each cold iteration walks 64 MiB outside the timing.
    benchmark->Iterations(200);
}

BENCHMARK(channel_backward_benchmark<channel_pass::relu_gradient_sums>)
    ->Name("channel/relu_gradient_sums")
    ->Apply(channel_shapes)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(channel_backward_benchmark<channel_pass::relu_combination>)
    ->Name("channel/relu_combination")
    ->Apply(channel_shapes)
    ->Unit(benchmark::kMicrosecond);

} // namespace

int main(int argc, char** argv)
{
    openblas_set_num_threads(1);
    return petra::bench::run(argc, argv, {{"openblas_core", openblas_get_corename()}});
}
