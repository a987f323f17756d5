// One reversible block of the reference network (an additive coupling whose
// residual function is conv-BN-ReLU-conv-BN-ReLU on 16 channels at 28x28):
// its compile-time counts, a forward, the inverse, and the fused
// reconstruct-and-backward, with how well the input comes back.
#include <array>
#include <cmath>
#include <cstdio>
#include <random>
#include <span>
#include <vector>

#include <petra/petra.hpp>

using namespace petra;

template <std::size_t C>
using residual = chain<conv2d<C, C, 3>, batch_norm<C>, relu, conv2d<C, C, 3>, batch_norm<C>, relu>;

using block = layer_for<additive_coupling<residual<16>>, halves<shape<16, 28, 28>>>;
static_assert(block::parameter_count == 2 * 16 * 16 * 9 + 4 * 16);

static double relative_distance(const std::vector<float>& a, const std::vector<float>& b)
{
    double difference = 0.0, norm = 0.0;
    for (std::size_t i = 0; i < a.size(); ++i) {
        difference += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
        norm += double(b[i]) * b[i];
    }
    return std::sqrt(difference / norm);
}

int main()
{
    const std::size_t batch = 16;
    std::printf("additive coupling on 2 x 16 x 28 x 28: %zu parameters, %zu forward FLOPs and %zu backward FLOPs "
                "per example (known at compile time)\n",
                block::parameter_count, block::forward_flops, block::backward_flops);

    // Parameters and running statistics of a fixed count: arrays, seen by the
    // block as spans of that extent. A batch is a view: values, batch size,
    // the shape in its type.
    std::mt19937_64 generator(1);
    std::array<float, block::parameter_count> parameters;
    std::array<float, block::state_count> state;
    block::initialize<float>(parameters, state, generator);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(batch * block::input::size), y(x.size()), work(block::workspace_size(batch));
    for (float& value : x) value = normal(generator);
    using pair_batch = batch_view<float, block::input>;

    block::forward(pass::training, parameters, state, pair_batch(x.data(), batch), pair_batch(y.data(), batch),
                   std::span<float>(work));

    std::vector<float> rebuilt(x.size());
    block::inverse(parameters, state, pair_batch(y.data(), batch), pair_batch(rebuilt.data(), batch),
                   std::span<float>(work));
    std::printf("inverse(forward(x)) differs from x by %.2e (relative, float)\n", relative_distance(rebuilt, x));

    std::vector<float> grad_y(y.size()), grad_x(x.size());
    std::array<float, block::parameter_count> grad_parameters{};
    for (float& value : grad_y) value = normal(generator);
    reconstruct_backward<block, float>(parameters, state, pair_batch(y.data(), batch), pair_batch(grad_y.data(), batch),
                                       pair_batch(rebuilt.data(), batch), pair_batch(grad_x.data(), batch),
                                       grad_parameters, std::span<float>(work));
    double norm = 0.0;
    for (float value : grad_parameters) norm += double(value) * value;
    std::printf("reconstruct_backward rebuilt x to %.2e and gave a parameter gradient of norm %.3f\n",
                relative_distance(rebuilt, x), std::sqrt(norm));
    return 0;
}
