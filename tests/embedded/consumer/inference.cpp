// Inference with no heap at all, built without exceptions or RTTI: the
// reference network's parameters in static storage, initialised in place;
// the images, the logits and predict's workspace in static arrays too; and a
// small model whose trained values are compiled into the program. malloc is
// replaced by a counting one, and from main's first line until the results
// are known nothing may be allocated. Exit status 0 when none was and the
// numbers are right.
#include <array>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <random>

#include <petra/petra.hpp> // without exceptions: all but checkpoint files and the data floor

#include "../../counting_malloc.hpp"

using namespace petra;
using net = reference_network<>;

namespace {

constexpr std::size_t batch = 8;
std::array<float, net::parameter_count> values;
std::array<float, net::state_count> state;
std::array<float, batch * net::input::size> images;
std::array<float, batch * net::output::size> logits;
std::array<std::byte, net::inference_workspace_bytes(batch)> workspace;

// Trained values compiled in: 2 inputs, a stem to two halves of 2, one
// coupling, a head to 2 logits. The point (1, 2) gives the logits (5, 1).
using tiny_network = network<input<2>, stem<dense<2, 4>>, additive_coupling<dense<2, 2>>, head<dense<4, 2>>>;
// clang-format off
constexpr std::array<float, tiny_network::parameter_count> tiny_values{
    1, 0, 0, 1, 1, 1, 1, -1, 0, 0, 0, 0.5f, // stem: weights 4 x 2, biases 4
    2, 0, 0, 2, 0, 1,                       // F: weights 2 x 2, biases 2
    1, 0, 0, 0, 0, 0, 1, 0, 0, 0};          // head: weights 2 x 4, biases 2
// clang-format on
constexpr std::array<float, tiny_network::state_count> tiny_state{};
constexpr network_parameters_view<tiny_network, const float> tiny(tiny_values, tiny_state);
std::array<std::byte, tiny_network::inference_workspace_bytes(1)> tiny_workspace;

} // namespace

int main()
{
    const std::size_t at_start = test::allocations.load();
    const network_parameters_view<net, float> parameters(values, state);
    initialize_parameters(parameters, 1);
    std::mt19937_64 generator(2);
    for (float& value : images) value = uniform_float(generator);
    predict(network_parameters_view<net, const float>(parameters), batch, images.data(), logits.data(), workspace);

    const std::array<float, 2> point{1, 2};
    std::array<float, 2> scores{};
    predict(tiny, 1, point.data(), scores.data(), tiny_workspace);
    const std::size_t allocated = test::allocations.load() - at_start;

    bool finite = true;
    for (float value : logits) finite = finite && std::isfinite(value);
    const bool tiny_right = scores[0] == 5.0f && scores[1] == 1.0f;
    std::printf("inference without exceptions or RTTI: %zu allocations; reference network logits %s; compiled-in "
                "model (%g, %g)\n",
                allocated, finite ? "finite" : "NOT finite", double(scores[0]), double(scores[1]));
    return allocated == 0 && finite && tiny_right ? 0 : 1;
}
