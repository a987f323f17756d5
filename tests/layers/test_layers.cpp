// Every layer's backward pass against central differences in double, for the
// input and every parameter; shapes and counts computed at compile time; batch
// normalisation's running statistics across passes.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include <petra/layers.hpp>

#include "layers/gradient_check.hpp"
#include "support.hpp"

using namespace petra;

TEST_CASE("dense: shapes, counts and gradients")
{
    using layer = layer_for<dense<12, 5>, shape<3, 2, 2>>;
    static_assert(std::is_same_v<layer::output, shape<5>>);
    static_assert(layer::parameter_count == 12 * 5 + 5);
    static_assert(layer::forward_flops == 2 * 12 * 5);
    std::mt19937_64 generator(1);
    test::check_gradients<layer>(generator);
}

TEST_CASE("relu: gradients away from the kink")
{
    std::mt19937_64 generator(2);
    test::check_gradients<layer_for<relu, shape<3, 4, 5>>>(generator, {.smallest_input = 0.05});
}

TEST_CASE("conv2d: shapes and gradients for every kernel, stride and padding")
{
    using same = layer_for<conv2d<3, 4, 3>, shape<3, 7, 6>>;
    static_assert(std::is_same_v<same::output, shape<4, 7, 6>>);
    static_assert(same::parameter_count == 4 * 3 * 9);
    using halved = layer_for<conv2d<3, 4, 3, 2>, shape<3, 7, 6>>;
    static_assert(std::is_same_v<halved::output, shape<4, 4, 3>>);
    using pointwise = layer_for<conv2d<3, 5, 1, 2>, shape<3, 7, 6>>;
    static_assert(std::is_same_v<pointwise::output, shape<5, 4, 3>>);
    std::mt19937_64 generator(3);
    test::check_gradients<same>(generator);
    test::check_gradients<halved>(generator);
    test::check_gradients<pointwise>(generator);
    test::check_gradients<layer_for<conv2d<2, 3, 3, 1, 0>, shape<2, 5, 5>>>(generator);
    test::check_gradients<layer_for<conv2d<9, 10, 3, 1>, shape<9, 9, 11>>>(generator, {.batch = 2});
}

TEST_CASE("batch_norm: gradients of a training pass, batch statistics included")
{
    using layer = layer_for<batch_norm<3>, shape<3, 4, 5>>;
    std::mt19937_64 generator(4);
    test::check_gradients<layer>(generator);
    test::check_gradients<layer_for<batch_norm<4>, shape<4>>>(generator, {.batch = 7});
}

TEST_CASE("batch_norm: only training passes move the running statistics")
{
    using layer = layer_for<batch_norm<2>, shape<2, 3, 3>>;
    std::mt19937_64 generator(5);
    std::vector<float> parameters(layer::parameter_count), state(layer::state_count),
        workspace(layer::workspace_size(4));
    layer::initialize(test::span_of<layer::parameter_count>(parameters), test::span_of<layer::state_count>(state),
                      generator);
    std::vector<float> x(4 * 18), y(x.size());
    fill_normal(std::span<float>(x), 3.0, 2.0, generator);
    const auto forward = [&](auto mode) {
        layer::forward(mode, test::span_of<layer::parameter_count>(parameters),
                       test::span_of<layer::state_count>(state), test::batch_of<layer::input>(x, 4),
                       test::batch_of<layer::output>(y, 4), std::span<float>(workspace));
    };
    // Only a training pass gets the statistics as writable, by type.
    static_assert(std::is_same_v<state_view<pass::recomputation_t, float, 4>, std::span<const float, 4>>);
    static_assert(std::is_same_v<state_view<pass::inference_t, float, 4>, std::span<const float, 4>>);
    static_assert(std::is_same_v<state_view<pass::training_t, float, 4>, std::span<float, 4>>);

    const auto initial = state;
    forward(pass::recomputation);
    CHECK(state == initial);
    forward(pass::inference);
    CHECK(state == initial);
    forward(pass::training);
    CHECK(state != initial);
    // After one training pass from (mean 0, variance 1), running = 0.9 initial + 0.1 batch.
    for (std::size_t c = 0; c < 2; ++c) {
        double sum = 0.0;
        for (std::size_t n = 0; n < 4; ++n)
            for (std::size_t p = 0; p < 9; ++p) sum += x[(n * 2 + c) * 9 + p];
        CHECK(state[c] == doctest::Approx(0.1 * sum / 36).epsilon(1e-5));
    }
    const auto trained = state;
    forward(pass::recomputation);
    CHECK(state == trained);
}

TEST_CASE("batch_norm: training normalises each channel of the batch")
{
    using layer = layer_for<batch_norm<3>, shape<3, 2, 2>>;
    std::mt19937_64 generator(6);
    std::vector<double> parameters(layer::parameter_count), state(layer::state_count),
        workspace(layer::workspace_size(5));
    layer::initialize(test::span_of<layer::parameter_count>(parameters), test::span_of<layer::state_count>(state),
                      generator);
    std::vector<double> x(5 * 12), y(x.size());
    fill_normal(std::span<double>(x), -4.0, 3.0, generator);
    layer::forward(pass::training, test::span_of<layer::parameter_count>(parameters),
                   test::span_of<layer::state_count>(state), test::batch_of<layer::input>(x, 5),
                   test::batch_of<layer::output>(y, 5), std::span<double>(workspace));
    for (std::size_t c = 0; c < 3; ++c) {
        double sum = 0.0, squares = 0.0;
        for (std::size_t n = 0; n < 5; ++n)
            for (std::size_t p = 0; p < 4; ++p) {
                const double value = y[(n * 3 + c) * 4 + p];
                sum += value;
                squares += value * value;
            }
        CHECK(sum / 20 == doctest::Approx(0.0).scale(1.0));
        CHECK(squares / 20 == doctest::Approx(1.0).epsilon(1e-4));
    }
}

TEST_CASE("global_average_pool and flatten: shapes and gradients")
{
    using pool = layer_for<global_average_pool, shape<3, 4, 5>>;
    static_assert(std::is_same_v<pool::output, shape<3>>);
    using flat = layer_for<flatten, shape<3, 4, 5>>;
    static_assert(std::is_same_v<flat::output, shape<60>>);
    std::mt19937_64 generator(7);
    test::check_gradients<pool>(generator);
    test::check_gradients<flat>(generator);
}

TEST_CASE("softmax_cross_entropy_loss: gradient of the mean loss")
{
    using loss = softmax_cross_entropy_loss<10>::bind<shape<10>>;
    std::mt19937_64 generator(8);
    const std::size_t batch = 4;
    std::vector<double> logits(batch * 10), gradient(logits.size());
    for (double& value : logits) value = uniform_real(generator, -2.0, 2.0);
    const std::vector<std::int32_t> labels = {3, 0, 9, 3};
    loss::evaluate(batch, logits.data(), labels.data(), gradient.data());
    std::vector<double> numeric(logits.size());
    for (std::size_t i = 0; i < logits.size(); ++i) {
        const double original = logits[i];
        logits[i] = original + 1e-5;
        const double above = loss::evaluate<double>(batch, logits.data(), labels.data(), nullptr);
        logits[i] = original - 1e-5;
        const double below = loss::evaluate<double>(batch, logits.data(), labels.data(), nullptr);
        logits[i] = original;
        numeric[i] = (above - below) / 2e-5;
    }
    CHECK(test::relative_error(gradient, numeric) < 1e-6);
}

// A residual function of the reference network's couplings, in miniature.
template <std::size_t C>
using residual = chain<conv2d<C, C, 3>, batch_norm<C>, relu, conv2d<C, C, 3>, batch_norm<C>, relu>;

TEST_CASE("chain: shapes, counts and FLOPs are sums over the layers")
{
    using bound = layer_for<residual<3>, shape<3, 5, 5>>;
    static_assert(std::is_same_v<bound::input, shape<3, 5, 5>>);
    static_assert(std::is_same_v<bound::output, shape<3, 5, 5>>);
    static_assert(bound::parameter_count == 2 * (3 * 3 * 9) + 2 * (2 * 3));
    static_assert(bound::state_count == 2 * (2 * 3));
    static_assert(bound::forward_flops == 2 * (2 * 75 * 27) + 2 * (4 * 75) + 2 * 75);
    using head = layer_for<chain<global_average_pool, dense<3, 10>>, shape<3, 5, 5>>;
    static_assert(std::is_same_v<head::output, shape<10>>);
    static_assert(head::parameter_count == 3 * 10 + 10);
}

TEST_CASE("chain: forward equals the layers applied one by one")
{
    using first = layer_for<conv2d<2, 4, 3, 2>, shape<2, 6, 6>>;
    using second = layer_for<batch_norm<4>, first::output>;
    using third = layer_for<relu, second::output>;
    using bound = layer_for<chain<conv2d<2, 4, 3, 2>, batch_norm<4>, relu>, shape<2, 6, 6>>;
    const std::size_t batch = 3;
    std::mt19937_64 generator(9);
    std::vector<float> parameters(bound::parameter_count), state(bound::state_count);
    bound::initialize(test::span_of<bound::parameter_count>(parameters), test::span_of<bound::state_count>(state),
                      generator);
    std::vector<float> x(batch * bound::input::size);
    for (float& value : x) value = uniform_real(generator, -1.0f, 1.0f);

    std::vector<float> y(batch * bound::output::size), workspace(bound::workspace_size(batch));
    auto chained_state = state;
    bound::forward(pass::training, test::span_of<bound::parameter_count>(parameters),
                   test::span_of<bound::state_count>(chained_state), test::batch_of<bound::input>(x, batch),
                   test::batch_of<bound::output>(y, batch), std::span<float>(workspace));

    std::vector<float> a(batch * first::output::size), b(a.size()), c(b.size()),
        bn_cache(second::workspace_size(batch));
    auto manual_state = state;
    const std::span<const float> all(parameters);
    // conv2d and relu have no state or workspace to pass.
    first::forward(pass::training, all.first<first::parameter_count>(), std::span<float, 0>(),
                   test::batch_of<first::input>(x, batch), test::batch_of<first::output>(a, batch), {});
    second::forward(pass::training, all.subspan<first::parameter_count, second::parameter_count>(),
                    test::span_of<second::state_count>(manual_state), test::batch_of<second::input>(a, batch),
                    test::batch_of<second::output>(b, batch), std::span<float>(bn_cache));
    third::forward(pass::training, std::span<const float, 0>(), std::span<float, 0>(),
                   test::batch_of<third::input>(b, batch), test::batch_of<third::output>(c, batch), {});
    CHECK(y == c);
    CHECK(chained_state == manual_state);
}

TEST_CASE("chain: gradients through every layer")
{
    std::mt19937_64 generator(10);
    using smooth = chain<conv2d<3, 3, 3>, batch_norm<3>, conv2d<3, 3, 3, 2>, batch_norm<3>>;
    test::check_gradients<layer_for<smooth, shape<3, 5, 5>>>(generator);
    // With ReLUs the check holds unless a step crosses a kink, which at
    // batch-normalised values and a step of 1e-5 is vanishingly rare.
    test::check_gradients<layer_for<residual<3>, shape<3, 5, 5>>>(generator);
    test::check_gradients<layer_for<chain<flatten, dense<12, 4>, relu, dense<4, 2>>, shape<3, 2, 2>>>(generator,
                                                                                                      {.batch = 5});
}

namespace {

// Backward with an empty grad_x (a network's first layer) adds the same
// parameter gradient as with it, and writes no input gradient anywhere.
template <class Bound>
void check_skipped_input_gradient()
{
    std::mt19937_64 generator(31);
    const std::size_t batch = 3;
    std::vector<double> parameters(Bound::parameter_count), state(Bound::state_count + 1);
    Bound::initialize(test::span_of<Bound::parameter_count>(parameters), test::span_of<Bound::state_count>(state),
                      generator);
    for (double& value : parameters) value += uniform_real(generator, -0.1, 0.1);
    const auto x = test::random_vector<double>(batch * Bound::input::size, generator);
    const auto grad_y = test::random_vector<double>(batch * Bound::output::size, generator);
    std::vector<double> y(grad_y.size()), grad_x(x.size());
    std::vector<double> with(Bound::parameter_count, 0.0), without(Bound::parameter_count, 0.0);
    for (std::vector<double>* gradient : {&with, &without}) {
        std::vector<double> workspace(Bound::workspace_size(batch));
        const auto parameter_values = test::span_of<Bound::parameter_count>(std::as_const(parameters));
        Bound::forward(pass::training, parameter_values, test::span_of<Bound::state_count>(state),
                       test::batch_of<typename Bound::input>(x, batch),
                       test::batch_of<typename Bound::output>(y, batch), std::span<double>(workspace));
        Bound::backward(parameter_values, test::batch_of<typename Bound::input>(x, batch),
                        test::batch_of<typename Bound::output>(grad_y, batch),
                        gradient == &with ? test::batch_of<typename Bound::input>(grad_x, batch)
                                          : batch_view<double, typename Bound::input>{},
                        test::span_of<Bound::parameter_count>(*gradient), std::span<double>(workspace));
    }
    CHECK(with == without);
}

} // namespace

TEST_CASE("every layer's backward may skip the input gradient")
{
    check_skipped_input_gradient<layer_for<dense<12, 5>, shape<3, 2, 2>>>();
    check_skipped_input_gradient<layer_for<conv2d<2, 4, 3, 2>, shape<2, 6, 6>>>();
    check_skipped_input_gradient<layer_for<batch_norm<2>, shape<2, 3, 3>>>();
    check_skipped_input_gradient<layer_for<relu, shape<2, 3, 3>>>();
    check_skipped_input_gradient<layer_for<global_average_pool, shape<2, 3, 3>>>();
    check_skipped_input_gradient<layer_for<flatten, shape<2, 3, 3>>>();
    check_skipped_input_gradient<layer_for<residual<2>, shape<2, 5, 5>>>();
}

TEST_CASE("fusion: a chain runs batch_norm then relu as batch_norm_relu, wherever the pair appears")
{
    using fused = layer_for<residual<4>, shape<4, 5, 5>>;
    static_assert(fused::length == 4); // conv, batch_norm_relu, conv, batch_norm_relu
    static_assert(std::is_same_v<fused::layer<1>, layer_for<batch_norm_relu<4>, shape<4, 5, 5>>>);
    static_assert(std::is_same_v<fused::layer<3>, layer_for<batch_norm_relu<4>, shape<4, 5, 5>>>);
    // The same parameters, state and FLOPs as the layers written.
    static_assert(fused::parameter_count == 2 * (4 * 4 * 9) + 2 * 8 && fused::state_count == 2 * 8);
    static_assert(fused::forward_flops == 2 * (2 * 100 * 36) + 2 * (4 * 100) + 2 * 100);
    // Anything else is bound layer by layer.
    static_assert(layer_for<chain<relu, batch_norm<4>>, shape<4, 5, 5>>::length == 2);
    static_assert(layer_for<chain<batch_norm<4>, conv2d<4, 4>, relu>, shape<4, 5, 5>>::length == 3);
    static_assert(layer_for<chain<batch_norm<4>, relu, relu>, shape<4, 5, 5>>::length == 2);
}

TEST_CASE_TEMPLATE("fusion: batch_norm_relu computes batch_norm then relu, forward and backward, bit for bit", T, float,
                   double)
{
    using input = shape<3, 5, 6>;
    using normalisation = layer_for<batch_norm<3>, input>;
    using rectifier = layer_for<relu, input>;
    using fused = layer_for<batch_norm_relu<3>, input>;
    const std::size_t batch = 4;
    std::mt19937_64 generator(41);
    auto parameters = test::random_vector<T>(fused::parameter_count, generator);
    const auto x = test::random_vector<T>(batch * input::size, generator);
    const auto grad_z = test::random_vector<T>(batch * input::size, generator);
    std::vector<T> state(fused::state_count, T(1)), fused_state = state;
    const auto values = test::span_of<fused::parameter_count>(std::as_const(parameters));

    // batch_norm, then relu, one after the other.
    std::vector<T> y(x.size()), z(x.size()), workspace(normalisation::workspace_size(batch));
    normalisation::forward(pass::training, values, test::span_of<normalisation::state_count>(state),
                           test::batch_of<input>(x, batch), test::batch_of<input>(y, batch), std::span<T>(workspace));
    rectifier::forward(pass::training, std::span<const T, 0>(), std::span<T, 0>(),
                       test::batch_of<input>(std::as_const(y), batch), test::batch_of<input>(z, batch), {});
    std::vector<T> grad_y(x.size()), grad_x(x.size()), grad_parameters(fused::parameter_count, T(0));
    rectifier::backward(std::span<const T, 0>(), test::batch_of<input>(std::as_const(y), batch),
                        test::batch_of<input>(grad_z, batch), test::batch_of<input>(grad_y, batch), std::span<T, 0>(),
                        {});
    normalisation::backward(values, test::batch_of<input>(x, batch),
                            test::batch_of<input>(std::as_const(grad_y), batch), test::batch_of<input>(grad_x, batch),
                            test::span_of<fused::parameter_count>(grad_parameters), std::span<T>(workspace));

    // The fused layer.
    std::vector<T> fused_z(x.size()), fused_cache(fused::workspace_size(batch)), fused_grad_x(x.size()),
        fused_grad_parameters(fused::parameter_count, T(0));
    fused::forward(pass::training, values, test::span_of<fused::state_count>(fused_state),
                   test::batch_of<input>(x, batch), test::batch_of<input>(fused_z, batch), std::span<T>(fused_cache));
    fused::backward(values, test::batch_of<input>(x, batch), test::batch_of<input>(grad_z, batch),
                    test::batch_of<input>(fused_grad_x, batch),
                    test::span_of<fused::parameter_count>(fused_grad_parameters), std::span<T>(fused_cache));

    CHECK(fused_z == z);
    CHECK(fused_state == state);
    CHECK(fused_grad_x == grad_x);
    CHECK(fused_grad_parameters == grad_parameters);
    // The ReLU cut some values and kept others.
    CHECK(std::count(z.begin(), z.end(), T(0)) > 0);
    CHECK(std::count(z.begin(), z.end(), T(0)) < std::ptrdiff_t(z.size()));
}

TEST_CASE("batch_norm_relu: gradients away from the kink")
{
    std::mt19937_64 generator(42);
    test::check_gradients<layer_for<batch_norm_relu<3>, shape<3, 4, 5>>>(generator);
    test::check_gradients<layer_for<batch_norm_relu<4>, shape<4>>>(generator, {.batch = 7});
}

namespace {

// forward_onto_of (layer.hpp) against forward and then kernels::add or
// kernels::subtract, bit for bit, for each pass and both combinations; with
// shape<4, 5, 7> the rows have a scalar tail as well as whole vectors.
template <class Layer, class T>
void check_forward_onto(std::mt19937_64& generator)
{
    using input = typename Layer::input;
    using output = typename Layer::output;
    const std::size_t batch = 3;
    auto parameters = test::random_vector<T>(Layer::parameter_count, generator);
    const auto values = test::span_of<Layer::parameter_count>(std::as_const(parameters));
    const auto x = test::random_vector<T>(batch * input::size, generator);
    const auto addend = test::random_vector<T>(batch * output::size, generator);
    std::vector<T> initial_state(Layer::state_count, T(1));
    const auto run = [&]<class Pass>(Pass mode, combination how) {
        std::vector<T> state = initial_state, onto_state = initial_state;
        std::vector<T> y(addend.size()), onto(addend.size()), workspace(Layer::workspace_size(batch)),
            onto_workspace(Layer::workspace_size(batch));
        Layer::forward(mode, values, test::span_of<Layer::state_count>(state), test::batch_of<input>(x, batch),
                       test::batch_of<output>(y, batch), std::span<T>(workspace));
        if (how == combination::add) {
            kernels::add(y.size(), y.data(), addend.data(), y.data());
        } else {
            kernels::subtract(y.size(), addend.data(), y.data(), y.data());
        }
        forward_onto_of<Layer>(mode, how, values, test::span_of<Layer::state_count>(onto_state),
                               test::batch_of<input>(x, batch), test::batch_of<output>(addend, batch),
                               test::batch_of<output>(onto, batch), std::span<T>(onto_workspace));
        CHECK(onto == y);
        CHECK(onto_state == state);
        CHECK(onto_workspace == workspace);
    };
    for (const combination how : {combination::add, combination::subtract_from}) {
        run(pass::training, how);
        run(pass::recomputation, how);
    }
}

} // namespace

TEST_CASE_TEMPLATE("forward_onto: a block's addition in a layer's last pass changes no bit", T, float, double)
{
    using input = shape<4, 5, 7>;
    std::mt19937_64 generator(43);
    check_forward_onto<layer_for<batch_norm<4>, input>, T>(generator);
    check_forward_onto<layer_for<batch_norm_relu<4>, input>, T>(generator);
    // A chain: its last layer's forward_onto (batch_norm_relu after fusion,
    // batch_norm), or forward and the kernel where the layer has none (conv2d).
    using residual = chain<conv2d<4, 4, 3>, batch_norm<4>, relu, conv2d<4, 4, 3>, batch_norm<4>, relu>;
    using normalization = layer_for<batch_norm_relu<4>, input>;
    static_assert(requires(std::span<T, 8> values, batch_view<T, input> y, std::span<T> workspace) {
        normalization::forward_onto(pass::training, combination::add, values, values, y, y, y, workspace);
    });
    check_forward_onto<layer_for<residual, input>, T>(generator);
    check_forward_onto<layer_for<chain<conv2d<4, 4, 1>, batch_norm<4>>, input>, T>(generator);
    check_forward_onto<layer_for<chain<batch_norm<4>, conv2d<4, 6, 3, 2>>, input>, T>(generator);
    check_forward_onto<layer_for<conv2d<4, 4, 3>, input>, T>(generator);
}

namespace {

// A chain of a convolution, batch_norm_relu and a convolution that takes an
// input map, against the same layers in two chains (the unfused reference:
// no pair crosses the cut), bit for bit: forward in every pass (output and
// running statistics), the input gradient and every parameter gradient.
template <class T, std::size_t C, class Input>
void check_mapped_chain(std::mt19937_64& generator)
{
    using fused = layer_for<chain<conv2d<C, C, 3>, batch_norm<C>, relu, conv2d<C, C, 3>, batch_norm<C>, relu>, Input>;
    using first = layer_for<chain<conv2d<C, C, 3>, batch_norm<C>, relu>, Input>;
    using second = layer_for<chain<conv2d<C, C, 3>, batch_norm<C>, relu>, Input>;
    static_assert(!fused::mapped[0] && fused::mapped[1] && !fused::mapped[2] && !fused::mapped[3]);
    // The batch_norm_relu output is neither written nor kept: the chain
    // keeps the two convolutions' outputs, not three outputs.
    static_assert(fused::intermediate_size == 2 * Input::size);
    constexpr std::size_t P = fused::parameter_count, S = fused::state_count;
    constexpr std::size_t P1 = first::parameter_count, S1 = first::state_count;
    const std::size_t batch = 3;
    const auto parameters = test::random_vector<T>(P, generator);
    const auto x = test::random_vector<T>(batch * Input::size, generator);
    const auto grad_y = test::random_vector<T>(batch * Input::size, generator);
    const std::span<const T, P> values(parameters.data(), P);
    const auto first_values = values.template first<P1>();
    const auto second_values = values.template last<P - P1>();

    const auto run = [&]<class Pass>(Pass mode) {
        std::vector<T> state(S, T(1)), reference_state = state;
        std::vector<T> y(x.size()), h(x.size()), expected(x.size());
        std::vector<T> workspace(fused::workspace_size(batch)), first_workspace(first::workspace_size(batch)),
            second_workspace(second::workspace_size(batch));
        const std::span<T, S> all_state(state.data(), S), all_reference(reference_state.data(), S);
        fused::forward(mode, values, all_state, test::batch_of<Input>(x, batch), test::batch_of<Input>(y, batch),
                       std::span<T>(workspace));
        first::forward(mode, first_values, all_reference.template first<S1>(), test::batch_of<Input>(x, batch),
                       test::batch_of<Input>(h, batch), std::span<T>(first_workspace));
        second::forward(mode, second_values, all_reference.template last<S - S1>(),
                        test::batch_of<Input>(std::as_const(h), batch), test::batch_of<Input>(expected, batch),
                        std::span<T>(second_workspace));
        CHECK(y == expected);
        CHECK(state == reference_state);
        if constexpr (std::is_same_v<Pass, pass::training_t>) {
            std::vector<T> grad_x(x.size()), grad_h(x.size()), expected_grad_x(x.size());
            std::vector<T> grad_parameters(P, T(0.5)), expected_parameters = grad_parameters;
            const std::span<T, P> all_expected(expected_parameters.data(), P);
            fused::backward(values, test::batch_of<Input>(x, batch), test::batch_of<Input>(grad_y, batch),
                            test::batch_of<Input>(grad_x, batch), test::span_of<P>(grad_parameters),
                            std::span<T>(workspace));
            second::backward(second_values, test::batch_of<Input>(std::as_const(h), batch),
                             test::batch_of<Input>(grad_y, batch), test::batch_of<Input>(grad_h, batch),
                             all_expected.template last<P - P1>(), std::span<T>(second_workspace));
            first::backward(first_values, test::batch_of<Input>(x, batch),
                            test::batch_of<Input>(std::as_const(grad_h), batch),
                            test::batch_of<Input>(expected_grad_x, batch), all_expected.template first<P1>(),
                            std::span<T>(first_workspace));
            CHECK(grad_x == expected_grad_x);
            CHECK(grad_parameters == expected_parameters);
            // The ReLU between the convolutions cut some values.
            CHECK(std::count(h.begin(), h.end(), T(0)) > 0);
        }
    };
    run(pass::training);
    run(pass::recomputation);
    run(pass::inference);
}

} // namespace

TEST_CASE_TEMPLATE("fusion: a convolution reads batch_norm_relu's input through its map, to the bit", T, float, double)
{
    std::mt19937_64 generator(47);
    // 16 channels: the map in the transposition's 16 x 16 blocks (float);
    // 9: its scalar path.
    check_mapped_chain<T, 16, shape<16, 5, 7>>(generator);
    check_mapped_chain<T, 9, shape<9, 6, 4>>(generator);
    // Where the convolution takes no map (fewer than 8 channels, or 8 input
    // channels in vectors of 16 floats: the direct form), the output is
    // written as before.
    static_assert(!layer_for<residual<4>, shape<4, 5, 5>>::mapped[1]);
    // The map into a chain's last layer, and forward_onto there.
    using into_last = layer_for<chain<batch_norm<9>, relu, conv2d<9, 9, 3>>, shape<9, 5, 6>>;
    static_assert(into_last::mapped[0]);
    check_forward_onto<into_last, T>(generator);
}

namespace {

// A chain of a convolution and a batch normalisation, whose convolution
// gives the batch statistics of its output (gives_statistics), against the
// two layers run one after the other (the unfused reference, where the
// normalisation reads the convolution's output for them): output,
// statistics in the workspace and running statistics the same to the bit
// where the convolution is direct (it calls channel_mean_variance), within
// a few units of rounding where it takes Winograd's form (it gathers them
// image by image); in inference, which normalises with the running
// statistics, the same to the bit.
template <class T, std::size_t C, class Input, class Normalization>
void check_statistics_chain(std::mt19937_64& generator, bool same_bits)
{
    using fused = layer_for<chain<conv2d<C, C, 3>, Normalization>, Input>;
    using convolution = layer_for<conv2d<C, C, 3>, Input>;
    using normalization = layer_for<Normalization, Input>;
    static_assert(fused::gives_statistics[0] && !fused::gives_statistics[1]);
    constexpr std::size_t P = fused::parameter_count, S = fused::state_count, P1 = convolution::parameter_count;
    const std::size_t batch = 5;
    auto parameters = test::random_vector<T>(P, generator);
    const auto x = test::random_vector<T>(batch * Input::size, generator, T(2), T(3));
    const std::span<const T, P> values(parameters.data(), P);
    const auto run = [&]<class Pass>(Pass mode) {
        std::vector<T> state(S), reference_state(S);
        for (std::size_t i = 0; i < S; ++i) state[i] = reference_state[i] = T(1) + T(i % 3);
        std::vector<T> y(x.size()), h(x.size()), expected(x.size());
        std::vector<T> workspace(fused::workspace_size(batch)), normalization_workspace(2 * C);
        fused::forward(mode, values, std::span<T, S>(state), test::batch_of<Input>(x, batch),
                       test::batch_of<Input>(y, batch), std::span<T>(workspace));
        convolution::forward(mode, values.template first<P1>(), std::span<T, 0>(), test::batch_of<Input>(x, batch),
                             test::batch_of<Input>(h, batch), std::span<T>());
        normalization::forward(mode, values.template last<P - P1>(), std::span<T, S>(reference_state),
                               test::batch_of<Input>(std::as_const(h), batch), test::batch_of<Input>(expected, batch),
                               std::span<T>(normalization_workspace));
        // The chain keeps the convolution's output, then the normalisation's workspace.
        const std::vector<T> kept(workspace.begin(), workspace.begin() + h.size());
        const std::vector<T> statistics(workspace.begin() + h.size(), workspace.end());
        CHECK(kept == h);
        if (same_bits || Pass::uses_running_statistics) {
            CHECK(y == expected);
            CHECK(statistics == normalization_workspace);
            CHECK(state == reference_state);
        } else {
            test::check_close(y, expected, test::accumulation_tolerance<T>(256));
            test::check_close(statistics, normalization_workspace, test::accumulation_tolerance<T>(256));
            test::check_close(state, reference_state, test::accumulation_tolerance<T>(256));
            if constexpr (Pass::updates_running_statistics) CHECK(state != std::vector<T>(S, T(1)));
        }
    };
    run(pass::training);
    run(pass::recomputation);
    run(pass::inference);
}

} // namespace

TEST_CASE_TEMPLATE("fusion: a convolution gives the batch normalisation after it its batch statistics", T, float,
                   double)
{
    std::mt19937_64 generator(61);
    // Winograd's form (at least 8 channels each side): both tiles' sizes.
    check_statistics_chain<T, 16, shape<16, 12, 10>, batch_norm<16>>(generator, false);
    check_statistics_chain<T, 9, shape<9, 5, 3>, batch_norm_relu<9>>(generator, false);
    // The direct form: channel_mean_variance over the output, the same bits.
    check_statistics_chain<T, 4, shape<4, 6, 5>, batch_norm<4>>(generator, true);
    // In a residual function both normalisations take them, the first also
    // mapping the second convolution's input.
    using function = layer_for<residual<16>, shape<16, 5, 5>>;
    static_assert(function::gives_statistics[0] && function::mapped[1] && function::gives_statistics[2]);
}

TEST_CASE("fusion: the mapped chain in bf16 equals the unfused layers in bf16, to the bit")
{
    if (!kernels::bf16_support().amx && !kernels::bf16_support().avx512_bf16) return;
    const precision_scope scope(precision::bf16);
    std::mt19937_64 generator(53);
    check_mapped_chain<float, 16, shape<16, 5, 7>>(generator);
    check_mapped_chain<float, 9, shape<9, 6, 4>>(generator);
}

TEST_CASE("fusion: the mapped chain's gradients by finite differences")
{
    std::mt19937_64 generator(59);
    using mapped = layer_for<chain<conv2d<9, 9, 3>, batch_norm<9>, relu, conv2d<9, 9, 3>>, shape<9, 4, 5>>;
    static_assert(mapped::mapped[1]);
    test::check_gradients<mapped>(generator);
}
