// Every layer's backward pass against central differences in double, for the
// input and every parameter; shapes and counts computed at compile time; batch
// normalisation's running statistics across passes.
#include <cmath>
#include <cstdint>
#include <random>
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
    std::vector<float> parameters(layer::parameter_count), state(layer::state_count), cache(layer::cache_size(4));
    layer::initialize(parameters.data(), state.data(), generator);
    std::vector<float> x(4 * 18), y(x.size());
    std::normal_distribution<float> values(3.0f, 2.0f);
    for (float& value : x) value = values(generator);

    const auto initial = state;
    layer::forward(pass::recomputation, 4, parameters.data(), state.data(), x.data(), y.data(), cache.data());
    CHECK(state == initial);
    layer::forward(pass::inference, 4, parameters.data(), state.data(), x.data(), y.data(), cache.data());
    CHECK(state == initial);
    layer::forward(pass::training, 4, parameters.data(), state.data(), x.data(), y.data(), cache.data());
    CHECK(state != initial);
    // After one training pass from (mean 0, variance 1), running = 0.9 initial + 0.1 batch.
    for (std::size_t c = 0; c < 2; ++c) {
        double sum = 0.0;
        for (std::size_t n = 0; n < 4; ++n)
            for (std::size_t p = 0; p < 9; ++p) sum += x[(n * 2 + c) * 9 + p];
        CHECK(state[c] == doctest::Approx(0.1 * sum / 36).epsilon(1e-5));
    }
    const auto trained = state;
    layer::forward(pass::recomputation, 4, parameters.data(), state.data(), x.data(), y.data(), cache.data());
    CHECK(state == trained);
}

TEST_CASE("batch_norm: training normalises each channel of the batch")
{
    using layer = layer_for<batch_norm<3>, shape<3, 2, 2>>;
    std::mt19937_64 generator(6);
    std::vector<double> parameters(layer::parameter_count), state(layer::state_count), cache(layer::cache_size(5));
    layer::initialize(parameters.data(), state.data(), generator);
    std::vector<double> x(5 * 12), y(x.size());
    std::normal_distribution<double> values(-4.0, 3.0);
    for (double& value : x) value = values(generator);
    layer::forward(pass::training, 5, parameters.data(), state.data(), x.data(), y.data(), cache.data());
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
    std::uniform_real_distribution<double> uniform(-2.0, 2.0);
    const std::size_t batch = 4;
    std::vector<double> logits(batch * 10), gradient(logits.size());
    for (double& value : logits) value = uniform(generator);
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
    bound::initialize(parameters.data(), state.data(), generator);
    std::vector<float> x(batch * bound::input::size);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    for (float& value : x) value = uniform(generator);

    std::vector<float> y(batch * bound::output::size), cache(bound::cache_size(batch));
    auto chained_state = state;
    bound::forward(pass::training, batch, parameters.data(), chained_state.data(), x.data(), y.data(), cache.data());

    std::vector<float> a(batch * first::output::size), b(a.size()), c(b.size()), bn_cache(second::cache_size(batch));
    auto manual_state = state;
    float* none = nullptr; // conv2d and relu have no parameters, state or cache to pass
    first::forward(pass::training, batch, parameters.data(), manual_state.data(), x.data(), a.data(), none);
    second::forward(pass::training, batch, parameters.data() + first::parameter_count, manual_state.data(), a.data(),
                    b.data(), bn_cache.data());
    third::forward(pass::training, batch, static_cast<const float*>(none), none, b.data(), c.data(), none);
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
    test::check_gradients<layer_for<chain<flatten, dense<12, 4>, relu, dense<4, 2>>, shape<3, 2, 2>>>(
        generator, {.batch = 5});
}

namespace {

// Backward with grad_x null (a network's first layer) adds the same
// parameter gradient as with it, and writes no input gradient anywhere.
template <class Bound>
void check_skipped_input_gradient()
{
    std::mt19937_64 generator(31);
    const std::size_t batch = 3;
    std::vector<double> parameters(Bound::parameter_count), state(Bound::state_count + 1);
    Bound::initialize(parameters.data(), state.data(), generator);
    for (double& value : parameters) value += std::uniform_real_distribution<double>(-0.1, 0.1)(generator);
    const auto x = test::random_vector<double>(batch * Bound::input::size, generator);
    const auto grad_y = test::random_vector<double>(batch * Bound::output::size, generator);
    std::vector<double> y(grad_y.size()), grad_x(x.size());
    std::vector<double> with(Bound::parameter_count, 0.0), without(Bound::parameter_count, 0.0);
    for (std::vector<double>* gradient : {&with, &without}) {
        std::vector<double> cache(Bound::cache_size(batch));
        Bound::forward(pass::training, batch, parameters.data(), state.data(), x.data(), y.data(), cache.data());
        Bound::backward(batch, parameters.data(), x.data(), cache.data(), grad_y.data(),
                        gradient == &with ? grad_x.data() : nullptr, gradient->data());
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
