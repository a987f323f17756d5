// Reconstruction error of the reference network's couplings, in fp32 and,
// where the CPU computes in it, in bf16 (layers/precision.hpp: the
// convolutions' operands rounded to bf16, the blocks' values float), side
// by side.
//
// A batch of random images goes forward through the network (batch
// statistics); each coupling's output is then inverted and compared with the
// input it really had. Per example, the error is ||x' - x|| / ||x||, in units
// of float's machine epsilon (2^-23): the distribution over examples and
// couplings is PETRA's floor, what reconstruction costs when the weights have
// not moved. Then the weights of each coupling are perturbed by a relative
// amount s (each parameter p becomes p + s * |p| * N(0, 1)), as an optimizer
// step between a forward and its backward would, and the error is measured
// again: PETRA's approximation, as a function of the step. Both precisions
// start from the same parameters and images; each inverts its own forward.
//
// Usage: bench_reconstruction [--batch N, at least 2, default 64] [--seed N, default 1]
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "command_line.hpp"

#include <petra/petra.hpp>
#include <petra/random.hpp>

namespace {

using net = petra::reference_network<>;

double quantile(std::vector<double> values, double q)
{
    std::sort(values.begin(), values.end());
    const std::size_t index = std::min(values.size() - 1, static_cast<std::size_t>(q * double(values.size())));
    return values[index];
}

// ||a - b|| / ||b|| for each example of a batch of `size` values per example.
std::vector<double> relative_errors(const std::vector<float>& a, const std::vector<float>& b, std::size_t batch,
                                    std::size_t size)
{
    // Couplings store a batch half-major: example n's two halves are at n and
    // batch + n.
    const std::size_t half = size / 2;
    std::vector<double> errors;
    for (std::size_t n = 0; n < batch; ++n) {
        double difference = 0.0, norm = 0.0;
        for (std::size_t part : {n, batch + n}) {
            for (std::size_t i = part * half; i < (part + 1) * half; ++i) {
                difference += (double(a[i]) - double(b[i])) * (double(a[i]) - double(b[i]));
                norm += double(b[i]) * double(b[i]);
            }
        }
        errors.push_back(std::sqrt(difference / norm));
    }
    return errors;
}

// One precision's errors: per coupling (block index, errors over the
// batch, in epsilons), and over all couplings for each perturbation step.
struct precision_errors {
    std::vector<std::pair<std::size_t, std::vector<double>>> couplings;
    std::vector<double> all;
    std::vector<std::vector<double>> perturbed;
};

precision_errors measure(petra::precision arithmetic, std::size_t batch, std::uint64_t seed,
                         const std::vector<double>& steps)
{
    const petra::precision_scope scope(arithmetic);
    const double epsilon = std::numeric_limits<float>::epsilon();
    auto parameters = net::make_parameters<float>(seed);
    std::mt19937_64 generator(seed + 1);
    std::vector<float> x(batch * net::input::size);
    for (float& value : x) value = petra::uniform_float(generator);
    precision_errors result;
    result.perturbed.resize(steps.size());
    net::for_each_block([&](auto index) {
        constexpr std::size_t i = decltype(index)::value;
        using block = net::block<i>;
        std::vector<float> y(batch * block::output::size), workspace(block::workspace_size(batch));
        const auto values = parameters.block_values<i>();
        const auto state = parameters.block_state<i>();
        const petra::batch_view<const float, typename block::input> input(x.data(), batch);
        const petra::batch_view<float, typename block::output> output(y.data(), batch);
        block::forward(petra::pass::training, values, state, input, output, std::span<float>(workspace));
        if constexpr (block::reversible) {
            std::vector<float> rebuilt(x.size());
            const petra::batch_view<float, typename block::input> rebuilt_input(rebuilt.data(), batch);
            block::inverse(values, state, output, rebuilt_input, std::span<float>(workspace));
            auto errors = relative_errors(rebuilt, x, batch, block::input::size);
            for (double& e : errors) e /= epsilon;
            result.all.insert(result.all.end(), errors.begin(), errors.end());
            result.couplings.emplace_back(i, std::move(errors));

            const std::vector<float> original(values.begin(), values.end());
            for (std::size_t s = 0; s < steps.size(); ++s) {
                for (std::size_t p = 0; p < original.size(); ++p) {
                    values[p] = original[p] +
                                float(steps[s]) * std::abs(original[p]) * float(petra::standard_normal(generator));
                }
                block::inverse(values, state, output, rebuilt_input, std::span<float>(workspace));
                const auto moved = relative_errors(rebuilt, x, batch, block::input::size);
                result.perturbed[s].insert(result.perturbed[s].end(), moved.begin(), moved.end());
            }
            std::copy(original.begin(), original.end(), values.begin());
        }
        x = std::move(y);
    });
    return result;
}

std::string quantiles(const std::vector<double>& errors, const char* format)
{
    char text[128];
    std::snprintf(text, sizeof text, format, quantile(errors, 0.5), quantile(errors, 0.9),
                  *std::max_element(errors.begin(), errors.end()));
    return text;
}

} // namespace

int main(int argc, char** argv)
{
    constexpr const char* usage = "usage: bench_reconstruction [--batch N] [--seed N]\n"
                                  "  --batch N  images per batch, at least 2 (batch statistics), default 64\n"
                                  "  --seed N   seed of the parameters, images and perturbations, default 1\n";
    std::size_t batch = 64;
    std::size_t seed = 1;
    petra::bench::read_command_line(argc, argv, "bench_reconstruction", usage,
                                    {{"--batch", &batch}, {"--seed", &seed}});
    if (batch < 2) {
        std::fprintf(stderr, "bench_reconstruction: --batch needs at least 2 images (batch statistics)\n%s", usage);
        return 2;
    }
    const double epsilon = std::numeric_limits<float>::epsilon();
    const std::vector<double> steps{1e-4, 1e-3, 1e-2, 1e-1};

    std::vector<std::pair<petra::precision, precision_errors>> runs;
    runs.emplace_back(petra::precision::fp32, measure(petra::precision::fp32, batch, seed, steps));
    if (petra::kernels::bf16_support().amx || petra::kernels::bf16_support().avx512_bf16) {
        runs.emplace_back(petra::precision::bf16, measure(petra::precision::bf16, batch, seed, steps));
    }
    std::printf("reference network, batch %zu, seed %zu; errors per example in units of float epsilon (%.3g); "
                "median, 90th percentile, max%s\n\n",
                batch, seed, epsilon,
                runs.size() == 1 ? "; bf16 not measured (this CPU has neither AMX nor AVX512-BF16)" : "");
    std::printf("| block |");
    for (const auto& run : runs) std::printf(" %s |", petra::precision_name(run.first));
    std::printf("\n|---|");
    for (std::size_t r = 0; r < runs.size(); ++r) std::printf("---:|");
    std::printf("\n");
    for (std::size_t c = 0; c < runs.front().second.couplings.size(); ++c) {
        std::printf("| %zu (coupling) |", runs.front().second.couplings[c].first);
        for (const auto& run : runs) {
            std::printf(" %s |", quantiles(run.second.couplings[c].second, "%.2f, %.2f, %.2f").c_str());
        }
        std::printf("\n");
    }
    std::printf("| all couplings (%zu examples) |", runs.front().second.all.size());
    for (const auto& run : runs) std::printf(" %s |", quantiles(run.second.all, "%.2f, %.2f, %.2f").c_str());
    std::printf("\n\n| relative weight perturbation s |");
    for (const auto& run : runs) std::printf(" %s: median, 90th percentile |", petra::precision_name(run.first));
    std::printf("\n|---:|");
    for (std::size_t r = 0; r < runs.size(); ++r) std::printf("---:|");
    std::printf("\n| 0 |");
    for (const auto& run : runs) {
        std::printf(" %.2e, %.2e |", quantile(run.second.all, 0.5) * epsilon, quantile(run.second.all, 0.9) * epsilon);
    }
    std::printf("\n");
    for (std::size_t s = 0; s < steps.size(); ++s) {
        std::printf("| %.0e |", steps[s]);
        for (const auto& run : runs) {
            std::printf(" %.2e, %.2e |", quantile(run.second.perturbed[s], 0.5),
                        quantile(run.second.perturbed[s], 0.9));
        }
        std::printf("\n");
    }
    return 0;
}
