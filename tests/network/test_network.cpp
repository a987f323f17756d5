// Networks as types: counts and profiles computed at compile time, the one
// parameter array with its block views, inference, and the two baseline
// trainers: exact backprop against central differences in double, and
// reversible backprop against exact backprop.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

#include <boost/hana/length.hpp>
#include <doctest/doctest.h>

#include <petra/boundary_layout.hpp>
#include <petra/core.hpp>

#include "layers/gradient_check.hpp"
#include "support.hpp"

using namespace petra;

namespace {

// At least two reversible blocks of each kind, a downsampling and a head.
using small_network = network<input<1, 6, 6>, stem<chain<conv2d<1, 8>, batch_norm<8>, relu>>,
                              repeated<2, additive_coupling<residual_function<4>>>, downsampling<4>,
                              revnet_coupling<residual_function<8>, residual_function<8>>, classifier_head<16, 3>>;

using reference = reference_network<>;

template <class T>
std::vector<std::int32_t> random_labels(std::size_t batch, std::size_t classes, std::mt19937_64& generator)
{
    std::vector<std::int32_t> labels(batch);
    for (auto& value : labels) value = uniform_int(generator, std::int32_t{0}, std::int32_t(classes) - 1);
    return labels;
}

// Parameters moved off their initial values (batch-norm scales 1 and shifts 0
// would hide mistakes in their gradients).
template <class Network, class T>
network_parameters<Network, T> perturbed_parameters(std::uint64_t seed)
{
    auto parameters = Network::template make_parameters<T>(seed);
    std::mt19937_64 generator(seed + 100);
    for (T& value : parameters.values()) value += uniform_real(generator, T(-0.2), T(0.2));
    return parameters;
}

} // namespace

TEST_CASE("network: the reference network's counts are known at compile time")
{
    static_assert(reference::block_count == 10);
    // stem 288 + 64; per coupling 2 convolutions and 2 batch norms of the
    // width; downsampling conv3x3 + conv1x1 + 2 batch norms; dense 128 -> 10.
    constexpr std::size_t stem = 1 * 32 * 9 + 64;
    constexpr auto coupling = [](std::size_t c) { return 2 * (c * c * 9) + 4 * c; };
    constexpr auto down = [](std::size_t c) { return 2 * c * c * 9 + 2 * c * c + 8 * c; };
    constexpr std::size_t head = 128 * 10 + 10;
    static_assert(reference::parameter_count ==
                  stem + 2 * (coupling(16) + coupling(32) + coupling(64)) + down(16) + down(32) + head);
    static_assert(reference::parameter_count == 222'058);
    // About 48 MFLOP per example forward, twice that backward.
    static_assert(reference::forward_flops > 48'000'000 && reference::forward_flops < 49'000'000);
    static_assert(reference::backward_flops > 2 * reference::forward_flops - 1'000'000);

    constexpr std::array<bool, 10> reversible{false, true, true, false, true, true, false, true, true, false};
    for (std::size_t i = 0; i < reference::block_count; ++i) {
        CAPTURE(i);
        CHECK(reference::profile[i].reversible == reversible[i]);
        CHECK(reference::parameter_offsets[i + 1] - reference::parameter_offsets[i] ==
              reference::profile[i].parameter_count);
        if (i > 0) CHECK(reference::profile[i].input_values == reference::profile[i - 1].output_values);
    }
    static_assert(reference::profile[0].input_values == 784);
    static_assert(reference::profile[1].output_values == 32 * 28 * 28);
    static_assert(reference::profile[4].output_values == 64 * 14 * 14);
    static_assert(reference::profile[9].output_bytes(sizeof(float)) == 40);
    static_assert(std::is_same_v<reference::output, shape<10>>);
}

TEST_CASE("network: repeated blocks are the same network as blocks written out")
{
    using written_out =
        network<input<1, 6, 6>, stem<chain<conv2d<1, 8>, batch_norm<8>, relu>>, additive_coupling<residual_function<4>>,
                additive_coupling<residual_function<4>>, downsampling<4>,
                revnet_coupling<residual_function<8>, residual_function<8>>, classifier_head<16, 3>>;
    static_assert(written_out::block_count == small_network::block_count);
    static_assert(std::is_same_v<written_out::block<2>, small_network::block<2>>);
    static_assert(written_out::parameter_count == small_network::parameter_count);
    static_assert(decltype(boost::hana::length(small_network::blocks))::value == 6);
}

TEST_CASE("network parameters: one array, initialised block by block, with a view per block")
{
    auto parameters = small_network::make_parameters<double>(7);
    CHECK(parameters.values().size() == small_network::parameter_count);
    CHECK(parameters.state().size() == small_network::state_count);
    // The same seed gives the same parameters; another seed others.
    auto same = small_network::make_parameters<double>(7);
    auto other = small_network::make_parameters<double>(8);
    CHECK(std::equal(parameters.values().begin(), parameters.values().end(), same.values().begin()));
    CHECK(!std::equal(parameters.values().begin(), parameters.values().end(), other.values().begin()));

    // Each view is the block's part of the array, initialised as the block
    // initialises itself, in order from the one generator.
    std::mt19937_64 generator(7);
    small_network::for_each_block([&](auto index) {
        constexpr std::size_t i = decltype(index)::value;
        using block = small_network::block<i>;
        std::vector<double> values(block::parameter_count), state(block::state_count);
        block::initialize(test::span_of<block::parameter_count>(values), test::span_of<block::state_count>(state),
                          generator);
        auto view = parameters.block_values<i>();
        CAPTURE(i);
        CHECK(view.data() == parameters.values().data() + small_network::parameter_offsets[i]);
        CHECK(std::equal(values.begin(), values.end(), view.begin(), view.end()));
        auto state_view = parameters.block_state<i>();
        CHECK(std::equal(state.begin(), state.end(), state_view.begin(), state_view.end()));
    });
    CHECK(reinterpret_cast<std::uintptr_t>(parameters.values().data()) % kernels::buffer_alignment == 0);
}

TEST_CASE("predict: inference block by block, each example on its own, running statistics untouched")
{
    auto parameters = perturbed_parameters<small_network, float>(3);
    std::mt19937_64 generator(4);
    for (float& value : parameters.state()) value = std::abs(value) + 0.5f; // running means and variances
    const std::size_t batch = 5;
    const auto images = test::random_vector<float>(batch * 36, generator);
    std::vector<float> logits(batch * 3);
    const std::vector<float> state_before(parameters.state().begin(), parameters.state().end());
    predict(parameters, batch, images.data(), logits.data());
    CHECK(std::equal(state_before.begin(), state_before.end(), parameters.state().begin()));

    // The same, by hand, block after block.
    std::vector<float> x(images), state(state_before);
    small_network::for_each_block([&](auto index) {
        constexpr std::size_t i = decltype(index)::value;
        using block = small_network::block<i>;
        std::vector<float> y(batch * block::output::size), workspace(block::workspace_size(batch));
        const auto block_state =
            std::span<const float>(state).subspan<small_network::state_offsets[i], block::state_count>();
        block::forward(pass::inference, small_network::parameters_of<i>(std::as_const(parameters).values()),
                       block_state, test::batch_of<typename block::input>(std::as_const(x), batch),
                       test::batch_of<typename block::output>(y, batch), std::span<float>(workspace));
        x = y;
    });
    CHECK(x == logits);

    // Inference treats examples independently.
    for (std::size_t n = 0; n < batch; ++n) {
        std::vector<float> alone(3);
        predict(parameters, 1, images.data() + n * 36, alone.data());
        for (std::size_t k = 0; k < 3; ++k) CHECK(alone[k] == doctest::Approx(logits[n * 3 + k]).epsilon(1e-5));
    }
}

TEST_CASE("exact backprop: the gradient of the mean loss matches central differences (double)")
{
    auto parameters = perturbed_parameters<small_network, double>(11);
    std::mt19937_64 generator(12);
    const std::size_t batch = 4;
    const auto images = test::random_vector<double>(batch * 36, generator);
    const auto labels = random_labels<double>(batch, 3, generator);
    exact_backprop<small_network, double> trainer(batch);
    std::vector<double> gradient(small_network::parameter_count, 0.0), unused(gradient.size());
    trainer.accumulate_gradient(parameters, batch, images.data(), labels.data(), gradient);

    auto loss_at = [&](const std::vector<double>& values) {
        auto moved = parameters;
        std::copy(values.begin(), values.end(), moved.values().begin());
        return trainer.accumulate_gradient(moved, batch, images.data(), labels.data(), unused);
    };
    const std::vector<double> base(parameters.values().begin(), parameters.values().end());
    // Up to 48 parameters of every block, spread evenly over its array (its
    // functions' weights, scales and shifts alike).
    const double step = 1e-5;
    small_network::for_each_block([&](auto index) {
        constexpr std::size_t i = decltype(index)::value;
        const std::size_t begin = small_network::parameter_offsets[i],
                          count = small_network::profile[i].parameter_count;
        const std::size_t stride = std::max<std::size_t>(1, count / 48);
        std::vector<double> analytic, numeric;
        for (std::size_t p = begin; p < begin + count; p += stride) {
            auto plus = base, minus = base;
            plus[p] += step;
            minus[p] -= step;
            numeric.push_back((loss_at(plus) - loss_at(minus)) / (2 * step));
            analytic.push_back(gradient[p]);
        }
        const double error = test::relative_error(analytic, numeric);
        INFO("block " << i << ": relative error " << error << " over " << numeric.size() << " parameters");
        CHECK(error < 1e-6);
    });
}

TEST_CASE("exact backprop: gradients accumulate over calls")
{
    auto parameters = perturbed_parameters<small_network, double>(13);
    std::mt19937_64 generator(14);
    const auto images = test::random_vector<double>(2 * 36, generator);
    const auto labels = random_labels<double>(2, 3, generator);
    exact_backprop<small_network, double> trainer(2);
    std::vector<double> once(small_network::parameter_count, 0.0), twice(once.size(), 0.0);
    trainer.accumulate_gradient(parameters, 2, images.data(), labels.data(), once);
    trainer.accumulate_gradient(parameters, 2, images.data(), labels.data(), twice);
    trainer.accumulate_gradient(parameters, 2, images.data(), labels.data(), twice);
    for (std::size_t p = 0; p < once.size(); ++p) CHECK(twice[p] == doctest::Approx(2 * once[p]).epsilon(1e-12));
}

template <class Network, class T = float>
void check_reversible_equals_exact(std::size_t batch, std::size_t image_size, std::uint64_t seed,
                                   double tolerance = 1e-5)
{
    std::mt19937_64 generator(seed);
    auto exact_parameters = perturbed_parameters<Network, T>(seed);
    auto reversible_parameters = exact_parameters;
    const auto images = test::random_vector<T>(batch * image_size, generator);
    const auto labels = random_labels<T>(batch, Network::output::size, generator);

    exact_backprop<Network, T> exact(batch);
    reversible_backprop<Network, T> reversible(batch);
    std::vector<T> exact_gradient(Network::parameter_count, T(0)), reversible_gradient(exact_gradient);
    const T exact_loss =
        exact.accumulate_gradient(exact_parameters, batch, images.data(), labels.data(), exact_gradient);
    const T reversible_loss =
        reversible.accumulate_gradient(reversible_parameters, batch, images.data(), labels.data(), reversible_gradient);
    // The same forward: the same loss and logits, bit for bit.
    CHECK(exact_loss == reversible_loss);
    CHECK(std::equal(exact.logits().begin(), exact.logits().end(), reversible.logits().begin(),
                     reversible.logits().end()));
    // Running statistics: updated by the one training forward of each, never
    // by reconstructions or recomputations.
    CHECK(std::equal(exact_parameters.state().begin(), exact_parameters.state().end(),
                     reversible_parameters.state().begin()));
    Network::for_each_block([&](auto index) {
        constexpr std::size_t i = decltype(index)::value;
        const auto begin = Network::parameter_offsets[i], count = Network::profile[i].parameter_count;
        if (count == 0) return; // a block without parameters (pixel_unshuffle)
        const double error = test::relative_distance(std::span<const T>(reversible_gradient).subspan(begin, count),
                                                     std::span<const T>(exact_gradient).subspan(begin, count));
        INFO("block " << i << ": relative difference " << error);
        CHECK(error < tolerance);
    });
    CHECK(reversible.memory_bytes() < exact.memory_bytes());
}

TEST_CASE("reversible backprop: the gradients of exact backprop, without stored activations (float)")
{
    check_reversible_equals_exact<small_network>(4, 36, 21);
    check_reversible_equals_exact<small_network>(1, 36, 22);
}

TEST_CASE("reversible backprop: the reference network's gradients equal exact backprop's (float)")
{
    check_reversible_equals_exact<reference>(3, 784, 23);
}

TEST_CASE("the reversible reference network: every block between stem and head reversible, costs within 10%")
{
    using reversible = reversible_reference_network<>;
    static_assert(reversible::block_count == 10);
    constexpr std::size_t kept = [] {
        std::size_t count = 0;
        for (const block_profile& profile : reversible::profile) count += profile.reversible ? 0 : 1;
        return count;
    }();
    static_assert(kept == 2 && !reversible::profile[0].reversible && !reversible::profile[9].reversible,
                  "only the stem and the head keep their inputs");
    static_assert(reversible::parameter_count == 201578);
    static_assert(10 * reversible::parameter_count >= 9 * reference::parameter_count);
    static_assert(10 * reversible::forward_flops >= 9 * reference::forward_flops &&
                  reversible::forward_flops <= reference::forward_flops);
    static_assert(std::is_same_v<reversible::block<3>::output, halves<shape<64, 14, 14>>>);
    static_assert(std::is_same_v<reversible::block<6>::output, halves<shape<256, 7, 7>>>);
}

// In float, rebuilding the 28 x 28 blocks' inputs through eight couplings
// whose perturbed weights make each function much larger than its input
// amplifies rounding: the stem's and the first coupling's gradients differ
// from exact backprop's by 5e-7 where the compiler fuses multiply-adds and by
// 4e-3 where it does not (-ffp-contract=off, or a sanitizer build). The
// double case below is the proof of exactness (1e-15 measured); this one
// catches a wrong buffer or block order, which differs at order 1.
TEST_CASE("reversible backprop: the reversible reference network's gradients equal exact backprop's (float)")
{
    check_reversible_equals_exact<reversible_reference_network<>>(3, 784, 24, 2e-2);
}

TEST_CASE("reversible backprop: the reversible reference network's gradients equal exact backprop's (double)")
{
    check_reversible_equals_exact<reversible_reference_network<>, double>(3, 784, 24, 1e-12);
}

TEST_CASE("trainers: bad batches, gradients and labels are refused with a plain message")
{
    auto parameters = small_network::make_parameters<float>(1);
    std::vector<float> images(3 * 36, 0.5f), gradient(small_network::parameter_count);
    std::vector<std::int32_t> labels{0, 1, 2};
    exact_backprop<small_network, float> exact(2);
    reversible_backprop<small_network, float> reversible(2);
    CHECK_THROWS_WITH(exact.accumulate_gradient(parameters, 3, images.data(), labels.data(), gradient),
                      "exact_backprop: batch of 3 examples; this trainer takes 1 to 2.");
    CHECK_THROWS_WITH(reversible.accumulate_gradient(parameters, 0, images.data(), labels.data(), gradient),
                      "reversible_backprop: batch of 0 examples; this trainer takes 1 to 2.");
    std::vector<float> short_gradient(10);
    CHECK_THROWS_AS(exact.accumulate_gradient(parameters, 2, images.data(), labels.data(), short_gradient),
                    std::invalid_argument);
    std::vector<std::int32_t> bad_labels{0, 3};
    const std::vector<float> state_before(parameters.state().begin(), parameters.state().end());
    CHECK_THROWS_WITH_AS(reversible.accumulate_gradient(parameters, 2, images.data(), bad_labels.data(), gradient),
                         "reversible_backprop: label 3 of example 1 is outside [0, 3).", std::invalid_argument);
    CHECK_THROWS_AS(exact.accumulate_gradient(parameters, 2, images.data(), bad_labels.data(), gradient),
                    std::invalid_argument);
    // Refused before the forward: the running statistics did not move.
    CHECK(std::equal(state_before.begin(), state_before.end(), parameters.state().begin()));
}

TEST_CASE("network: the weight mask marks convolution and dense weights, not biases or batch-norm parameters")
{
    const auto mask = reference::weight_mask<float>();
    REQUIRE(mask.size() == reference::parameter_count);
    std::size_t weights = 0;
    for (float value : mask) {
        CHECK((value == 0.0f || value == 1.0f));
        weights += value == 1.0f;
    }
    // Every convolution weight and the dense matrix; not the 10 biases of the
    // dense layer nor the 2 values per batch-norm channel.
    // Batch norm has 2 parameters per channel (gamma, beta), as many as its
    // running statistics: 2 x 672 channels.
    static_assert(reference::state_count == 2 * 672);
    CHECK(weights == reference::parameter_count - 10 - reference::state_count);
    // The stem: 288 convolution weights, then gamma and beta of 32 channels.
    for (std::size_t i = 0; i < 288; ++i) CHECK(mask[i] == 1.0f);
    for (std::size_t i = 288; i < 352; ++i) CHECK(mask[i] == 0.0f);
    // The head: 1280 dense weights, then 10 biases.
    const std::size_t head = reference::parameter_offsets[9];
    for (std::size_t i = head; i < head + 1280; ++i) CHECK(mask[i] == 1.0f);
    for (std::size_t i = head + 1280; i < head + 1290; ++i) CHECK(mask[i] == 0.0f);
}

// A run of blocks' parameters held on their own (what a stage on another
// process holds): drawn from a seed, the same values as the whole network's
// from that seed; its weight mask the whole network's, cut.
TEST_CASE("parameter slice: the blocks' values of make_parameters(seed), and their weight mask")
{
    using net = reference_network<>;
    const auto whole = net::make_parameters<float>(7);
    const auto mask = net::weight_mask<float>();
    const auto check_slice = [&](auto slice) {
        using slice_type = decltype(slice);
        CAPTURE(slice_type::first_block);
        const auto values = slice.values();
        const auto state = slice.state();
        CHECK(std::equal(values.begin(), values.end(), whole.values().begin() + slice_type::parameter_offset));
        CHECK(std::equal(state.begin(), state.end(), whole.state().begin() + slice_type::state_offset));
        const auto slice_mask = slice_type::weight_mask();
        CHECK(std::equal(slice_mask.begin(), slice_mask.end(), mask.begin() + slice_type::parameter_offset));
        auto copy = net::make_parameters<float>(1);
        slice.copy_into(copy);
        CHECK(std::equal(values.begin(), values.end(), copy.values().begin() + slice_type::parameter_offset));
    };
    check_slice(parameter_slice<net, 0, 2, float>(7));
    check_slice(parameter_slice<net, 4, 7, float>(7));
    check_slice(parameter_slice<net, 9, 10, float>(7));
    check_slice(parameter_slice<net, 3, 8, float>(whole));
}

TEST_CASE("predict in the caller's workspace: the numbers of predict, nothing written past the workspace")
{
    auto parameters = perturbed_parameters<small_network, float>(31);
    std::mt19937_64 generator(32);
    for (float& value : parameters.state()) value = std::abs(value) + 0.5f;
    for (const std::size_t batch : {1, 5, 64}) {
        CAPTURE(batch);
        const auto images = test::random_vector<float>(batch * 36, generator);
        std::vector<float> expected(batch * 3), logits(batch * 3);
        predict(parameters, batch, images.data(), expected.data());
        // Every start within a cache line: the workspace may start anywhere.
        const std::size_t bytes = small_network::inference_workspace_bytes(batch);
        std::vector<std::byte> storage(bytes + 2 * kernels::buffer_alignment, std::byte{0x5a});
        for (std::size_t start : {0, 1, 8, 63}) {
            std::fill(logits.begin(), logits.end(), std::nanf(""));
            predict(parameters, batch, images.data(), logits.data(),
                    std::span<std::byte>(storage.data() + start, bytes));
            CHECK(logits == expected);
            CHECK(std::all_of(storage.begin() + std::ptrdiff_t(start + bytes), storage.end(),
                              [](std::byte value) { return value == std::byte{0x5a}; }));
        }
        CHECK_THROWS_WITH_AS(predict(parameters, batch, images.data(), logits.data(),
                                     std::span<std::byte>(storage.data(), bytes - kernels::buffer_alignment)),
                             doctest::Contains("inference_workspace_bytes"), std::invalid_argument);
    }
    // A compile-time constant: the size of a static buffer.
    static std::array<std::byte, small_network::inference_workspace_bytes(4)> workspace;
    const auto images = test::random_vector<float>(4 * 36, generator);
    std::vector<float> expected(4 * 3), logits(4 * 3);
    predict(parameters, 4, images.data(), expected.data());
    predict(parameters, 4, images.data(), logits.data(), workspace);
    CHECK(logits == expected);
}

namespace {
// Trained values compiled into the program: 2 inputs, a stem of a dense
// layer to 4 values (two halves of 2), one coupling, a head to 2 logits.
using tiny_network = network<input<2>, stem<dense<2, 4>>, additive_coupling<dense<2, 2>>, head<dense<4, 2>>>;
// clang-format off
constexpr std::array<float, tiny_network::parameter_count> tiny_values{
    1, 0, 0, 1, 1, 1, 1, -1, 0, 0, 0, 0.5f, // stem: weights 4 x 2, biases 4
    2, 0, 0, 2, 0, 1,                       // F: weights 2 x 2, biases 2
    1, 0, 0, 0, 0, 0, 1, 0, 0, 0};          // head: weights 2 x 4, biases 2
// clang-format on
constexpr std::array<float, tiny_network::state_count> tiny_state{};
} // namespace

TEST_CASE("parameters in the caller's storage: a view of constant arrays predicts, a view of writable ones trains")
{
    static_assert(tiny_network::parameter_count == 28 && tiny_network::state_count == 0);
    constexpr network_parameters_view<tiny_network, const float> trained(tiny_values, tiny_state);
    static_assert(trained.block_values<1>()[0] == 2.0f);
    // The point (1, 2): the stem gives (1, 2, 3, -1 + 0.5), halves x = (1, 2)
    // and x~ = (3, -0.5); the coupling y = x~ + F(x) = (3 + 2, -0.5 + 4 + 1),
    // y~ = x; the head reads (y, y~) = (5, 4.5, 1, 2) and gives (5, 1).
    const std::array<float, 2> point{1, 2};
    std::array<float, 2> logits{};
    alignas(64) static std::array<std::byte, tiny_network::inference_workspace_bytes(1)> workspace;
    predict(trained, 1, point.data(), logits.data(), workspace);
    CHECK(logits == std::array<float, 2>{5, 1});

    // A network_parameters and a view of a copy of its arrays compute the same.
    auto owned = perturbed_parameters<small_network, float>(41);
    std::vector<float> values(owned.values().begin(), owned.values().end());
    std::vector<float> state(owned.state().begin(), owned.state().end());
    const network_parameters_view<small_network, float> mine(
        std::span<float, small_network::parameter_count>(values.data(), small_network::parameter_count),
        std::span<float, small_network::state_count>(state.data(), small_network::state_count));
    std::mt19937_64 generator(42);
    const auto images = test::random_vector<float>(4 * 36, generator);
    const auto labels = random_labels<float>(4, 3, generator);
    std::vector<float> from_owned(4 * 3), from_view(4 * 3);
    predict(owned, 4, images.data(), from_owned.data());
    predict(mine, 4, images.data(), from_view.data());
    CHECK(from_owned == from_view);
    exact_backprop<small_network, float> trainer(4);
    std::vector<float> owned_gradient(small_network::parameter_count), view_gradient(owned_gradient);
    trainer.accumulate_gradient(owned, 4, images.data(), labels.data(), owned_gradient);
    trainer.accumulate_gradient(mine, 4, images.data(), labels.data(), view_gradient);
    CHECK(owned_gradient == view_gradient);
    // The training forward updated the running statistics through the view.
    CHECK(std::equal(state.begin(), state.end(), owned.state().begin()));

    // Initialised in place as make_parameters initialises.
    std::vector<float> fresh_values(small_network::parameter_count), fresh_state(small_network::state_count);
    initialize_parameters(
        network_parameters_view<small_network, float>(std::span<float, small_network::parameter_count>(fresh_values),
                                                      std::span<float, small_network::state_count>(fresh_state)),
        5);
    const auto made = small_network::make_parameters<float>(5);
    CHECK(std::equal(fresh_values.begin(), fresh_values.end(), made.values().begin()));
    CHECK(std::equal(fresh_state.begin(), fresh_state.end(), made.state().begin()));
}

TEST_CASE("boundary layout: a chain's boundaries a half apart, other neighbours apart, every boundary in the buffer")
{
    using detail::boundary_placement, detail::half_order;
    // Chains [0, 1, 2] (8 values, 4 a half), [3, 4] (4, 2) and [5]; boundary
    // 6 claims a half of a boundary of another size and starts a chain.
    constexpr std::array<std::size_t, 7> sizes{8, 8, 8, 4, 4, 6, 4};
    constexpr std::array<bool, 7> shares{false, true, true, false, true, false, true};
    constexpr auto kept =
        detail::lay_out_boundaries(sizes, shares, half_order::later_below, boundary_placement::every_boundary_kept);
    static_assert(kept.offset == std::array<std::size_t, 7>{8, 4, 0, 18, 16, 22, 28} && kept.size == 32);
    constexpr auto reused =
        detail::lay_out_boundaries(sizes, shares, half_order::later_above, boundary_placement::neighbours_apart);
    static_assert(reused.offset == std::array<std::size_t, 7>{0, 4, 8, 0, 2, 6, 0} && reused.size == 16);
    // A run of five couplings: chains of three boundaries at most, in the two
    // activations two alternating buffers would take.
    constexpr std::array<std::size_t, 5> run{8, 8, 8, 8, 8};
    constexpr std::array<bool, 5> joined{false, true, true, true, true};
    constexpr auto forward_run =
        detail::lay_out_boundaries(run, joined, half_order::later_below, boundary_placement::neighbours_apart);
    static_assert(forward_run.offset == std::array<std::size_t, 5>{8, 4, 0, 8, 4} && forward_run.size == 16);
    constexpr auto gradient_run =
        detail::lay_out_boundaries(run, joined, half_order::later_above, boundary_placement::neighbours_apart);
    static_assert(gradient_run.offset == std::array<std::size_t, 5>{0, 4, 8, 0, 4} && gradient_run.size == 16);
    // Growing sizes: two alternating places of the largest where the
    // placement above would take more.
    constexpr auto growing = detail::lay_out_boundaries(std::array<std::size_t, 3>{4, 4, 5}, std::array<bool, 3>{},
                                                        half_order::later_below, boundary_placement::neighbours_apart);
    static_assert(growing.offset == std::array<std::size_t, 3>{0, 5, 0} && growing.size == 10);

    // Random sequences: the properties the trainers and stages rely on.
    std::mt19937_64 generator(3);
    for (int trial = 0; trial < 500; ++trial) {
        std::array<std::size_t, 12> random_sizes{};
        std::array<bool, 12> random_shares{};
        for (std::size_t i = 0; i < random_sizes.size(); ++i) {
            random_shares[i] = uniform_int(generator, 0, 2) > 0;
            random_sizes[i] = i > 0 && random_shares[i] && uniform_int(generator, 0, 5) > 0
                                  ? random_sizes[i - 1]
                                  : std::size_t(uniform_int(generator, 1, 12));
        }
        for (const half_order order : {half_order::later_below, half_order::later_above}) {
            for (const boundary_placement placement :
                 {boundary_placement::every_boundary_kept, boundary_placement::neighbours_apart}) {
                const auto layout = detail::lay_out_boundaries(random_sizes, random_shares, order, placement);
                std::size_t whole = 0;   // what boundaries end to end would take
                std::size_t largest = 0; // the largest boundary
                std::size_t chained = 1; // boundaries in the chain so far
                for (std::size_t i = 0; i < random_sizes.size(); ++i) {
                    CAPTURE(trial);
                    CAPTURE(i);
                    whole += random_sizes[i];
                    largest = std::max(largest, random_sizes[i]);
                    CHECK(layout.offset[i] + random_sizes[i] <= layout.size);
                    if (i == 0) continue;
                    const std::size_t size = random_sizes[i], before = layout.offset[i - 1], here = layout.offset[i];
                    const bool joined = random_shares[i] && size == random_sizes[i - 1] && size % 2 == 0 &&
                                        (placement == boundary_placement::every_boundary_kept || chained < 3);
                    chained = joined ? chained + 1 : 1;
                    if (joined) {
                        // The output's second half is the input's first, or the
                        // input gradient's second half the output gradient's first.
                        const bool half_apart =
                            order == half_order::later_below ? here + size / 2 == before : before + size / 2 == here;
                        CHECK(half_apart);
                    } else {
                        CHECK((here + size <= before || before + random_sizes[i - 1] <= here));
                    }
                }
                if (placement == boundary_placement::neighbours_apart) {
                    // Chains of three boundaries at most (twice the largest
                    // boundary), in two places at most.
                    CHECK(layout.size <= 4 * largest);
                } else {
                    CHECK(layout.size <= whole);
                    // Kept boundaries overlap only where joined.
                    for (std::size_t i = 0; i < random_sizes.size(); ++i) {
                        for (std::size_t k = i + 2; k < random_sizes.size(); ++k) {
                            const bool apart = layout.offset[i] + random_sizes[i] <= layout.offset[k] ||
                                               layout.offset[k] + random_sizes[k] <= layout.offset[i];
                            bool in_one_chain = true;
                            for (std::size_t m = i + 1; m <= k; ++m) {
                                in_one_chain = in_one_chain && random_shares[m] && random_sizes[m] == random_sizes[i] &&
                                               random_sizes[i] % 2 == 0;
                            }
                            if (!in_one_chain) CHECK(apart);
                        }
                    }
                }
            }
        }
    }
}
