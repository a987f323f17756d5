// Reconstruction error of the reference network's couplings, in float.
//
// A batch of random images goes forward through the network (batch
// statistics); each coupling's output is then inverted and compared with the
// input it really had. Per example, the error is ||x' - x|| / ||x||, in units
// of float's machine epsilon (2^-23): the distribution over examples and
// couplings is PETRA's floor, what reconstruction costs when the weights have
// not moved. Then the weights of each coupling are perturbed by a relative
// amount s (each parameter p becomes p + s * |p| * N(0, 1)), as an optimizer
// step between a forward and its backward would, and the error is measured
// again: PETRA's approximation, as a function of the step.
//
// Usage: bench_reconstruction [batch, default 64] [seed, default 1]
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <span>
#include <vector>

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

} // namespace

int main(int argc, char** argv)
{
    const std::size_t batch = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 64;
    const std::uint64_t seed = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1;
    const double epsilon = std::numeric_limits<float>::epsilon();

    auto parameters = net::make_parameters<float>(seed);
    std::mt19937_64 generator(seed + 1);
    std::vector<float> x(batch * net::input::size);
    for (float& value : x) value = petra::uniform_float(generator);

    const std::vector<double> steps{1e-4, 1e-3, 1e-2, 1e-1};
    std::vector<double> all_errors;
    std::vector<std::vector<double>> perturbed_errors(steps.size());
    std::printf("reference network, batch %zu, seed %zu; errors per example in units of float epsilon (%.3g)\n\n",
                batch, std::size_t(seed), epsilon);
    std::printf("| block | median | 90th percentile | max |\n|---|---:|---:|---:|\n");
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
            std::printf("| %zu (coupling) | %.2f | %.2f | %.2f |\n", i, quantile(errors, 0.5), quantile(errors, 0.9),
                        *std::max_element(errors.begin(), errors.end()));
            all_errors.insert(all_errors.end(), errors.begin(), errors.end());

            const std::vector<float> original(values.begin(), values.end());
            for (std::size_t s = 0; s < steps.size(); ++s) {
                for (std::size_t p = 0; p < original.size(); ++p) {
                    values[p] = original[p] +
                                float(steps[s]) * std::abs(original[p]) * float(petra::standard_normal(generator));
                }
                block::inverse(values, state, output, rebuilt_input, std::span<float>(workspace));
                const auto moved = relative_errors(rebuilt, x, batch, block::input::size);
                perturbed_errors[s].insert(perturbed_errors[s].end(), moved.begin(), moved.end());
            }
            std::copy(original.begin(), original.end(), values.begin());
        }
        x = std::move(y);
    });
    std::printf("| all couplings (%zu examples) | %.2f | %.2f | %.2f |\n\n", all_errors.size(),
                quantile(all_errors, 0.5), quantile(all_errors, 0.9),
                *std::max_element(all_errors.begin(), all_errors.end()));

    std::printf("| relative weight perturbation s | median relative error | 90th percentile |\n"
                "|---:|---:|---:|\n");
    std::printf("| 0 | %.2e | %.2e |\n", quantile(all_errors, 0.5) * epsilon, quantile(all_errors, 0.9) * epsilon);
    for (std::size_t s = 0; s < steps.size(); ++s) {
        std::printf("| %.0e | %.2e | %.2e |\n", steps[s], quantile(perturbed_errors[s], 0.5),
                    quantile(perturbed_errors[s], 0.9));
    }
    return 0;
}
