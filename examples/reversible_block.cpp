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

static double relative_distance(std::span<const float> a, std::span<const float> b)
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
    // block as spans of that extent. A batch has the shape in its type and
    // the batch size as a value: an owned_batch holds one and is passed where
    // the block reads a view of it; where the block writes, view() gives the
    // writable view its template deduces the value type from.
    std::mt19937_64 generator(1);
    std::array<float, block::parameter_count> parameters;
    std::array<float, block::state_count> state;
    block::initialize<float>(parameters, state, generator);
    owned_batch<float, block::input> x(batch), y(batch);
    std::vector<float> work(block::workspace_size(batch));
    fill_normal(x.values(), 0.0, 1.0, generator); // petra's sampler: the same values on every library

    block::forward(pass::training, parameters, state, x, y.view(), std::span<float>(work));

    owned_batch<float, block::input> rebuilt(batch);
    block::inverse(parameters, state, y, rebuilt.view(), std::span<float>(work));
    std::printf("inverse(forward(x)) differs from x by %.2e (relative, float)\n",
                relative_distance(rebuilt.values(), x.values()));

    owned_batch<float, block::input> grad_y(batch), grad_x(batch);
    std::array<float, block::parameter_count> grad_parameters{};
    fill_normal(grad_y.values(), 0.0, 1.0, generator);
    reconstruct_backward<block, float>(parameters, state, y, grad_y, rebuilt, grad_x, grad_parameters,
                                       std::span<float>(work));
    double norm = 0.0;
    for (float value : grad_parameters) norm += double(value) * value;
    std::printf("reconstruct_backward rebuilt x to %.2e and gave a parameter gradient of norm %.3f\n",
                relative_distance(rebuilt.values(), x.values()), std::sqrt(norm));
    return 0;
}
