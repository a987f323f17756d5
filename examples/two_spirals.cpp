// A small dense reversible network on a toy problem: two interleaved spirals
// of 2-D points, one class each. The network is declared in a few lines; its
// parameter count and FLOPs are computed at compile time; it is trained from
// the same initial parameters with exact backprop (activations stored) and
// with reversible backprop (activations reconstructed), which compute the
// same gradients up to rounding, so both runs end at the same accuracy; then
// with PETRA in 3 stages on 3 threads (stale gradients, inputs rebuilt with
// the current weights), which trains as well.
//
// Usage: two_spirals [epochs, default 100]
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numbers>
#include <random>
#include <span>
#include <vector>

#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

#include <petra/petra.hpp>

using namespace petra;

// The network: 2 coordinates -> 2 halves of 16 values -> 4 couplings ->
// 2 logits. Each coupling's F is dense, ReLU, dense on one half.
using mixing = chain<dense<16, 64>, relu, dense<64, 16>>;
using spiral_network = network<input<2>,                               // a point (x, y)
                               stem<chain<dense<2, 32>, relu>>,        // to two halves of 16 values
                               repeated<4, additive_coupling<mixing>>, // y = x~ + F(x), y~ = x
                               head<dense<32, 2>>>;                    // halves joined, to 2 logits

static_assert(spiral_network::parameter_count == (2 * 32 + 32) + 4 * (16 * 64 + 64 + 64 * 16 + 16) + (32 * 2 + 2));

namespace {

struct dataset {
    xt::xtensor<float, 2> points;        // N x 2
    xt::xtensor<std::int32_t, 1> labels; // N
};

// count points per spiral, turning 1.5 times, with a little noise.
dataset two_spirals(std::size_t count, std::uint64_t seed)
{
    std::mt19937_64 generator(seed);
    dataset data{xt::xtensor<float, 2>::from_shape({2 * count, 2}),
                 xt::xtensor<std::int32_t, 1>::from_shape({2 * count})};
    for (std::size_t i = 0; i < 2 * count; ++i) {
        const float t = uniform_real(generator, 0.05f, 1.0f), angle = 3.0f * std::numbers::pi_v<float> * t;
        const float sign = i % 2 == 0 ? 1.0f : -1.0f;
        data.points(i, 0) = sign * t * std::cos(angle) + 0.02f * float(standard_normal(generator));
        data.points(i, 1) = sign * t * std::sin(angle) + 0.02f * float(standard_normal(generator));
        data.labels(i) = std::int32_t(i % 2);
    }
    return data;
}

double accuracy(const network_parameters<spiral_network, float>& parameters, const dataset& data)
{
    const std::size_t count = data.labels.size();
    const xt::xtensor<float, 2> logits = predict(parameters, data.points);
    std::size_t correct = 0;
    for (std::size_t n = 0; n < count; ++n) {
        correct += (logits(n, 1) > logits(n, 0)) == (data.labels(n) == 1);
    }
    return double(correct) / double(count);
}

// Mini-batch gradient descent with Trainer; returns the trained parameters.
template <class Trainer>
network_parameters<spiral_network, float> train(const char* name, const dataset& data, std::size_t epochs)
{
    const std::size_t batch = 32, count = data.labels.size();
    const float learning_rate = 0.01f;
    auto parameters = spiral_network::make_parameters<float>(1);
    Trainer trainer(batch);
    std::vector<float> gradient(spiral_network::parameter_count);
    for (std::size_t epoch = 1; epoch <= epochs; ++epoch) {
        double loss = 0.0;
        for (std::size_t first = 0; first + batch <= count; first += batch) {
            std::fill(gradient.begin(), gradient.end(), 0.0f);
            const std::size_t end = first + batch;
            loss += trainer.accumulate_gradient(parameters, xt::view(data.points, xt::range(first, end)),
                                                xt::view(data.labels, xt::range(first, end)), gradient);
            std::span<float> values = parameters.values();
            for (std::size_t p = 0; p < values.size(); ++p) values[p] -= learning_rate * gradient[p];
        }
        if (epoch == 1 || epoch % 25 == 0 || epoch == epochs) {
            std::printf("%-20s epoch %4zu: mean loss %.4f, training accuracy %.1f%%\n", name, epoch,
                        loss / double(count / batch), 100.0 * accuracy(parameters, data));
        }
    }
    return parameters;
}

// PETRA: the same network cut into 3 stages at compile time, one thread
// each, plain SGD as above.
network_parameters<spiral_network, float> train_with_petra(const dataset& data, std::size_t epochs)
{
    constexpr auto cuts = partition<spiral_network, 3>();
    const std::size_t batch = 32, count = data.labels.size();
    auto parameters = spiral_network::make_parameters<float>(1);
    thread_pipeline<spiral_network, cuts, sgd<float>> pipeline(
        parameters, sgd_options{.momentum = 0.0, .nesterov = false, .weight_decay = 0.0},
        [](std::size_t) { return 0.01; }, {.batch = batch});
    for (std::size_t epoch = 1; epoch <= epochs; ++epoch) {
        for (std::size_t first = 0; first + batch <= count; first += batch) {
            const std::size_t end = first + batch;
            pipeline.feed(xt::view(data.points, xt::range(first, end)), xt::view(data.labels, xt::range(first, end)));
        }
        const epoch_statistics statistics = pipeline.drain();
        if (epoch == 1 || epoch % 25 == 0 || epoch == epochs) {
            std::printf("%-20s epoch %4zu: mean loss %.4f, training accuracy %.1f%% (during the epoch)\n",
                        "PETRA, 3 stages", epoch, statistics.mean_loss(), 100.0 * statistics.accuracy());
        }
    }
    return parameters;
}

} // namespace

int main(int argc, char** argv)
{
    const std::size_t epochs = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 100;
    std::printf("spiral_network: %zu blocks, %zu parameters, %zu FLOPs forward and %zu backward per example "
                "(compile-time values)\n",
                spiral_network::block_count, spiral_network::parameter_count, spiral_network::forward_flops,
                spiral_network::backward_flops);

    // Shuffled once: the two classes alternate, so every batch holds both.
    const dataset training = two_spirals(512, 7), test = two_spirals(256, 8);
    auto exact = train<exact_backprop<spiral_network, float>>("exact backprop", training, epochs);
    auto reversible = train<reversible_backprop<spiral_network, float>>("reversible backprop", training, epochs);

    double largest_difference = 0.0;
    for (std::size_t p = 0; p < spiral_network::parameter_count; ++p) {
        largest_difference = std::max(largest_difference, double(std::abs(exact.values()[p] - reversible.values()[p])));
    }
    std::printf("largest difference between the two backprop runs' parameters after %zu epochs: %.2e\n", epochs,
                largest_difference);
    auto petra = train_with_petra(training, epochs);
    const double exact_accuracy = accuracy(exact, test), reversible_accuracy = accuracy(reversible, test),
                 petra_accuracy = accuracy(petra, test);
    std::printf("test accuracy: exact backprop %.1f%%, reversible backprop %.1f%%, PETRA in 3 stages %.1f%%\n",
                100.0 * exact_accuracy, 100.0 * reversible_accuracy, 100.0 * petra_accuracy);
    // A run that did not learn the spirals is a failure (the example also runs as a test).
    return exact_accuracy > 0.9 && reversible_accuracy > 0.9 && petra_accuracy > 0.9 ? 0 : 1;
}
