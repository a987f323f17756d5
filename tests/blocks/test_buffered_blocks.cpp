// The blocks that change shape (stem, downsampling, heads): their shapes, and
// their backward, after a forward and recomputed from the stored input,
// against central differences in double; the recomputation, which writes no
// output, against the forward it replaces, bit for bit (for couplings too,
// which a stage recomputes where it keeps their input).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <random>
#include <span>
#include <vector>

#include <doctest/doctest.h>

#include <petra/blocks.hpp>
#include <petra/layers.hpp>

#include "blocks/block_as_layer.hpp"
#include "layers/gradient_check.hpp"
#include "layers/workspace_scaling.hpp"
#include "support.hpp"

using namespace petra;

namespace {

using image = shape<1, 6, 6>;
using stem_block = layer_for<stem<chain<conv2d<1, 8, 3>, batch_norm<8>, relu>>, image>;
using downsample_block = layer_for<downsampling<4>, stem_block::output>;
using head_block = layer_for<classifier_head<16, 10>, downsample_block::output>;
using normalised_head_block = layer_for<normalised_classifier_head<16, 10>, downsample_block::output>;

template <std::size_t C>
using residual = chain<conv2d<C, C, 3>, batch_norm<C>, relu, conv2d<C, C, 3>, batch_norm<C>, relu>;
// 16 channels: the Winograd form, its batch norm read through an input map.
using wide_coupling_block = layer_for<additive_coupling<residual<16>>, halves<shape<16, 6, 6>>>;
using revnet_block = layer_for<revnet_coupling<residual<4>, residual<4>>, stem_block::output>;

} // namespace

TEST_CASE("shape-changing blocks: shapes chain from the image to the logits")
{
    static_assert(std::is_same_v<stem_block::output, halves<shape<4, 6, 6>>>);
    static_assert(std::is_same_v<downsample_block::output, halves<shape<8, 3, 3>>>);
    static_assert(std::is_same_v<head_block::output, shape<10>>);
    static_assert(!stem_block::reversible && !downsample_block::reversible && !head_block::reversible);
    static_assert(downsample_block::parameter_count == (8 * 4 * 9 + 16) + (8 * 4 + 16));
    static_assert(head_block::parameter_count == 16 * 10 + 10);
    static_assert(std::is_same_v<normalised_head_block::output, shape<10>> && !normalised_head_block::reversible);
    static_assert(normalised_head_block::parameter_count == 2 * 16 + 16 * 10 + 10);
    static_assert(normalised_head_block::state_count == 2 * 16);
}

TEST_CASE("halves: splitting channels in two and merging them back is exact")
{
    using half = shape<5>;
    const std::size_t batch = 3, half_size = half::size;
    std::vector<float> whole(2 * batch * half_size), pair(whole.size()), back(whole.size());
    for (std::size_t i = 0; i < whole.size(); ++i) whole[i] = float(i);
    split_into_halves<half>(test::batch_of<shape<10>>(whole, batch), test::batch_of<halves<half>>(pair, batch));
    // Example 1's second half (values 15..19) is the second half's second example.
    CHECK(pair[(batch + 1) * half_size] == 15.0f);
    merge_halves<half>(test::batch_of<halves<half>>(pair, batch), test::batch_of<shape<10>>(back, batch));
    CHECK(back == whole);
}

TEST_CASE_TEMPLATE("shape-changing blocks: backward after forward matches central differences", Block, stem_block,
                   downsample_block, head_block, normalised_head_block)
{
    std::mt19937_64 generator(11);
    test::check_gradients<test::backward_after_forward<Block>>(generator, {.batch = 3});
}

TEST_CASE_TEMPLATE("shape-changing blocks: backward recomputed from the stored input matches central differences",
                   Block, stem_block, downsample_block, head_block, normalised_head_block)
{
    std::mt19937_64 generator(13);
    test::check_gradients<test::recompute_then_backward<Block>>(generator, {.batch = 3});
}

TEST_CASE("a block initialises each of its functions in its own place")
{
    // downsampling<4>: F = conv3x3 (4 -> 8), BN(8), ReLU; G = conv1x1 (4 -> 8), BN(8).
    using F = downsample_block::first;
    using G = downsample_block::second;
    std::vector<float> parameters(downsample_block::parameter_count, std::nanf("")),
        state(downsample_block::state_count, std::nanf(""));
    std::mt19937_64 generator(12);
    downsample_block::initialize(test::span_of<downsample_block::parameter_count>(parameters),
                                 test::span_of<downsample_block::state_count>(state), generator);
    for (float value : parameters) CHECK(std::isfinite(value));
    for (float value : state) CHECK(std::isfinite(value));
    // Each function's batch norm: gamma 1 and beta 0 after its convolution's
    // weights, running mean 0 and variance 1 in its part of the state.
    const std::size_t f_conv = 8 * 4 * 9, g_conv = 8 * 4;
    for (std::size_t c = 0; c < 8; ++c) {
        CHECK(parameters[f_conv + c] == 1.0f);
        CHECK(parameters[f_conv + 8 + c] == 0.0f);
        CHECK(parameters[F::parameter_count + g_conv + c] == 1.0f);
        CHECK(parameters[F::parameter_count + g_conv + 8 + c] == 0.0f);
        CHECK(state[8 + c] == 1.0f);
        CHECK(state[F::state_count + 8 + c] == 1.0f);
    }
    static_assert(G::parameter_count == g_conv + 16);
}

// recompute_backward leaves only what backward needs (recompute_for_backward_of,
// layers/layer.hpp): every gradient must be the one backward gives after the
// forward it replaces, to the bit, with no memory lent for an output (every
// block here has a lighter way than its forward, and says so:
// recomputation_writes_output). Workspaces start as NaN, so that a value
// backward reads and the recomputation did not write shows.
TEST_CASE_TEMPLATE("a recomputation gives backward what the forward did, bit for bit, with no output", Block,
                   stem_block, downsample_block, head_block, normalised_head_block, wide_coupling_block, revnet_block)
{
    using input = typename Block::input;
    using output = typename Block::output;
    constexpr std::size_t batch = 3;
    constexpr float nan = std::numeric_limits<float>::quiet_NaN();
    std::mt19937_64 generator(17);
    std::vector<float> parameters(Block::parameter_count), state(Block::state_count);
    Block::initialize(test::span_of<Block::parameter_count>(parameters), test::span_of<Block::state_count>(state),
                      generator);
    for (float& value : parameters) value += 0.2f * uniform_real(generator, -1.0f, 1.0f);
    std::vector<float> x(batch * input::size), grad_y(batch * output::size);
    for (float& value : x) value = uniform_real(generator, -1.0f, 1.0f);
    for (float& value : grad_y) value = uniform_real(generator, -1.0f, 1.0f);

    struct gradients {
        std::vector<float> input, parameters;
    };
    const auto params = test::span_of<Block::parameter_count>(std::as_const(parameters));
    const auto running = test::span_of<Block::state_count>(std::as_const(state));
    const auto run = [&](bool recompute) {
        std::vector<float> workspace(Block::workspace_size(batch), nan), y(batch * output::size, nan);
        gradients result{std::vector<float>(x.size(), nan), std::vector<float>(Block::parameter_count, 0.0f)};
        const auto block_x = test::batch_of<input>(std::as_const(x), batch);
        const auto block_grad_y = test::batch_of<output>(std::as_const(grad_y), batch);
        const auto block_grad_x = test::batch_of<input>(result.input, batch);
        const auto grad_parameters = test::span_of<Block::parameter_count>(result.parameters);
        if (recompute) {
            static_assert(!recomputation_writes_output<Block>());
            recompute_backward<Block>(params, running, block_x, block_grad_y, block_grad_x, grad_parameters,
                                      std::span<float>(workspace), batch_view<float, output>{});
        } else {
            Block::forward(pass::recomputation, params, running, block_x, test::batch_of<output>(y, batch),
                           std::span<float>(workspace));
            Block::backward(params, block_x, block_grad_y, block_grad_x, grad_parameters, std::span<float>(workspace));
        }
        return result;
    };
    const gradients after_forward = run(false), recomputed = run(true);
    const auto finite = [](const std::vector<float>& values) {
        return std::all_of(values.begin(), values.end(), [](float value) { return std::isfinite(value); });
    };
    CHECK(finite(after_forward.input));
    CHECK(finite(after_forward.parameters));
    CHECK(recomputed.input == after_forward.input);
    CHECK(recomputed.parameters == after_forward.parameters);
}

// Where a recomputation may write the output it is lent, and where not: a
// layer with forward_statistics or an empty workspace has a lighter way; a
// chain asks its last layer; a layer with a workspace and nothing lighter
// (test::workspace_scaling) runs its forward into the output.
TEST_CASE("recomputation_writes_output: only a forward with no lighter way writes the lent output")
{
    using small = shape<4, 6, 6>;
    static_assert(!recomputation_writes_output<layer_for<conv2d<4, 4, 3>, small>>());
    static_assert(!recomputation_writes_output<layer_for<batch_norm<4>, small>>());
    static_assert(!recomputation_writes_output<layer_for<chain<conv2d<4, 4, 3>, batch_norm<4>, relu>, small>>());
    static_assert(recomputation_writes_output<layer_for<test::workspace_scaling<2>, small>>());
    static_assert(recomputation_writes_output<layer_for<chain<relu, test::workspace_scaling<2>>, small>>());
    static_assert(!recomputation_writes_output<layer_for<chain<test::workspace_scaling<2>, relu>, small>>());
    // Its recomputation runs its forward into the lent output.
    using bound = layer_for<test::workspace_scaling<2>, shape<2>>;
    std::vector<float> x{1.0f, -3.0f}, y(2, 0.0f), workspace(1, 0.0f);
    recompute_for_backward_of<bound>(pass::recomputation, std::span<const float, 0>(), std::span<const float, 0>(),
                                     test::batch_of<shape<2>>(std::as_const(x), 1), test::batch_of<shape<2>>(y, 1),
                                     std::span<float>(workspace));
    CHECK(workspace[0] == 2.0f);
    CHECK(y == std::vector<float>{2.0f, -6.0f});
}
