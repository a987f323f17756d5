// The thread's precision (layers/precision.hpp) and what conv2d computes in
// it: under bf16, exactly what the bf16 kernels compute for the passes the
// CPU's engine takes in bf16 (kernels::bf16_convolution_pays), exactly what
// the float kernels compute for the others (the stem's one input channel,
// the 1x1 kernel's gradients; with vdpbf16ps every weight gradient) and in
// double; scratch demands of the precision asked; the refusals on a CPU
// without either engine.
#include <algorithm>
#include <cstddef>
#include <random>
#include <span>
#include <stdexcept>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include <petra/kernels/convolution.hpp>
#include <petra/kernels/convolution_bf16.hpp>
#include <petra/layers.hpp>
#include <petra/layers/precision.hpp>
#include <petra/random.hpp>

using namespace petra;

namespace {

template <class T>
std::vector<T> random_values(std::size_t count, std::mt19937_64& generator)
{
    std::vector<T> values(count);
    fill_normal(std::span<T>(values), 0.0, 1.0, generator);
    return values;
}

// What Layer (a bound conv2d) computes under precision `arithmetic` on this
// thread: its output, input gradient and weight gradient (added to ones).
template <class Layer, class T>
struct conv2d_results {
    std::vector<T> y, grad_x, grad_weights;
};
template <class Layer, class T>
conv2d_results<Layer, T> run_conv2d(precision arithmetic, std::size_t batch, const std::vector<T>& x,
                                    const std::vector<T>& weights, const std::vector<T>& grad_y)
{
    const precision_scope scope(arithmetic);
    conv2d_results<Layer, T> results{std::vector<T>(batch * Layer::output::size),
                                     std::vector<T>(batch * Layer::input::size),
                                     std::vector<T>(Layer::parameter_count, T(1))};
    const std::span<const T, Layer::parameter_count> parameters(weights.data(), Layer::parameter_count);
    Layer::forward(pass::training, parameters, std::span<T, 0>{},
                   const_batch<T, typename Layer::input>(x.data(), batch),
                   batch_view<T, typename Layer::output>(results.y.data(), batch), {});
    Layer::backward(parameters, const_batch<T, typename Layer::input>(x.data(), batch),
                    const_batch<T, typename Layer::output>(grad_y.data(), batch),
                    batch_view<T, typename Layer::input>(results.grad_x.data(), batch),
                    std::span<T, Layer::parameter_count>(results.grad_weights.data(), Layer::parameter_count), {});
    return results;
}

// Layer's three passes in bf16 against the kernels each pass should take:
// the bf16 kernels where the CPU's engine takes the pass in bf16, the float
// ones otherwise; bit for bit.
template <class Layer>
void check_conv2d_in_bf16(std::size_t batch, std::mt19937_64& generator)
{
    const auto shape = Layer::geometry(batch);
    const auto engine = kernels::best_bf16_engine();
    const bool forward_in_bf16 = kernels::bf16_convolution_pays(shape, kernels::convolution_pass::forward, engine);
    const bool input_gradient_in_bf16 =
        kernels::bf16_convolution_pays(shape, kernels::convolution_pass::input_gradient, engine);
    const bool weight_gradient_in_bf16 =
        kernels::bf16_convolution_pays(shape, kernels::convolution_pass::weight_gradient, engine);
    CHECK((forward_in_bf16 <= Layer::bf16_forward && input_gradient_in_bf16 <= Layer::bf16_input_gradient &&
           weight_gradient_in_bf16 <= Layer::bf16_weight_gradient));
    CAPTURE(kernels::bf16_engine_name(engine));
    CAPTURE(shape.in_channels);
    CAPTURE(shape.kernel);
    CAPTURE(shape.stride);
    const auto x = random_values<float>(batch * Layer::input::size, generator);
    const auto weights = random_values<float>(Layer::parameter_count, generator);
    const auto grad_y = random_values<float>(batch * Layer::output::size, generator);
    const auto layer = run_conv2d<Layer, float>(precision::bf16, batch, x, weights, grad_y);
    std::vector<float> y(layer.y.size()), grad_x(layer.grad_x.size()), grad_weights(Layer::parameter_count, 1.0f);
    if (forward_in_bf16) {
        kernels::convolution_forward_bf16(shape, x.data(), weights.data(), y.data());
    } else {
        kernels::convolution_forward(shape, x.data(), weights.data(), y.data());
    }
    if (input_gradient_in_bf16) {
        kernels::convolution_backward_input_bf16(shape, grad_y.data(), weights.data(), grad_x.data());
    } else {
        kernels::convolution_backward_input(shape, grad_y.data(), weights.data(), grad_x.data());
    }
    if (weight_gradient_in_bf16) {
        kernels::convolution_backward_weights_bf16(shape, x.data(), grad_y.data(), grad_weights.data(), 1.0f);
    } else {
        kernels::convolution_backward_weights(shape, x.data(), grad_y.data(), grad_weights.data(), 1.0f);
    }
    CHECK(layer.y == y);
    CHECK(layer.grad_x == grad_x);
    CHECK(layer.grad_weights == grad_weights);
    // And fp32 is the float kernels, which the passes in bf16 differ from.
    const auto float_layer = run_conv2d<Layer, float>(precision::fp32, batch, x, weights, grad_y);
    CHECK((float_layer.y != layer.y) == forward_in_bf16);
    CHECK((float_layer.grad_x != layer.grad_x) == input_gradient_in_bf16);
    CHECK((float_layer.grad_weights != layer.grad_weights) == weight_gradient_in_bf16);
}

using three_by_three = layer_for<conv2d<6, 5, 3>, shape<6, 9, 7>>;
using strided = layer_for<conv2d<4, 8, 3, 2>, shape<4, 9, 8>>;
using pointwise = layer_for<conv2d<4, 8, 1, 2, 0>, shape<4, 9, 8>>;
using stem_convolution = layer_for<conv2d<1, 8, 3>, shape<1, 10, 10>>;

} // namespace

TEST_CASE("precision: fp32 by default, set per thread by nested scopes, named and parsed")
{
    CHECK(thread_precision() == precision::fp32);
    {
        const precision_scope outer(precision::bf16);
        CHECK(thread_precision() == precision::bf16);
        precision seen_elsewhere = precision::bf16;
        std::thread([&] { seen_elsewhere = thread_precision(); }).join();
        CHECK(seen_elsewhere == precision::fp32);
        {
            const precision_scope inner(precision::fp32);
            CHECK(thread_precision() == precision::fp32);
        }
        CHECK(thread_precision() == precision::bf16);
    }
    CHECK(thread_precision() == precision::fp32);
    for (precision value : {precision::fp32, precision::bf16}) CHECK(parse_precision(precision_name(value)) == value);
    CHECK_THROWS_WITH_AS(parse_precision("fp16"), "petra: the precision \"fp16\" is neither fp32 nor bf16.",
                         std::invalid_argument);
}

TEST_CASE("precision: which passes of conv2d have bf16 kernels")
{
    // Some engine takes each pass in bf16 (AMX: all but the 1x1 kernel's
    // gradients and the stem's).
    static_assert(three_by_three::bf16_forward && three_by_three::bf16_input_gradient &&
                  three_by_three::bf16_weight_gradient);
    static_assert(strided::bf16_forward && strided::bf16_input_gradient && strided::bf16_weight_gradient);
    static_assert(pointwise::bf16_forward && !pointwise::bf16_input_gradient && !pointwise::bf16_weight_gradient);
    static_assert(!stem_convolution::bf16_forward && !stem_convolution::bf16_input_gradient &&
                  !stem_convolution::bf16_weight_gradient);
    // With vdpbf16ps, the passes that run faster in bf16
    // (kernels::bf16_convolution_pays): the 3x3 forward correlations that
    // Winograd's float form does not take (of the reference network: the
    // downsampling's forward); no weight gradient.
    {
        using kernels::convolution_pass;
        using kernels::convolution_shape;
        constexpr auto vdp = kernels::bf16_engine::avx512_bf16;
        constexpr convolution_shape couplings_28{1, 16, 28, 28, 16, 3, 1, 1}, couplings_14{1, 32, 14, 14, 32, 3, 1, 1},
            couplings_7{1, 64, 7, 7, 64, 3, 1, 1}, downsampling{1, 16, 28, 28, 32, 3, 2, 1},
            shortcut{1, 16, 28, 28, 32, 1, 2, 0}, stem{1, 1, 28, 28, 32, 3, 1, 1},
            few_channels{1, 4, 28, 28, 4, 3, 1, 1};
        static_assert(!kernels::bf16_convolution_pays(couplings_28, convolution_pass::forward, vdp) &&
                      !kernels::bf16_convolution_pays(couplings_28, convolution_pass::input_gradient, vdp) &&
                      !kernels::bf16_convolution_pays(couplings_28, convolution_pass::weight_gradient, vdp));
        static_assert(kernels::bf16_convolution_pays(few_channels, convolution_pass::forward, vdp) &&
                      kernels::bf16_convolution_pays(few_channels, convolution_pass::input_gradient, vdp));
        static_assert(!kernels::bf16_convolution_pays(couplings_14, convolution_pass::forward, vdp) &&
                      !kernels::bf16_convolution_pays(couplings_7, convolution_pass::input_gradient, vdp));
        static_assert(kernels::bf16_convolution_pays(downsampling, convolution_pass::forward, vdp) &&
                      !kernels::bf16_convolution_pays(downsampling, convolution_pass::input_gradient, vdp));
        static_assert(!kernels::bf16_convolution_pays(shortcut, convolution_pass::forward, vdp) &&
                      !kernels::bf16_convolution_pays(stem, convolution_pass::forward, vdp));
    }
    // The scratch stated covers the kernels the precision may take on
    // either engine: in bf16, both kernels of a pass some engine takes in bf16.
    const auto geometry = three_by_three::geometry(3);
    CHECK(forward_scratch_of<three_by_three, float>(3).region_bytes() ==
          kernels::convolution_forward_scratch<float>(geometry).region_bytes());
    kernels::scratch_demand forward = kernels::convolution_forward_scratch<float>(geometry);
    forward.merge(kernels::convolution_forward_bf16_scratch(geometry));
    CHECK(forward_scratch_of<three_by_three, float>(3, precision::bf16).region_bytes() == forward.region_bytes());
    kernels::scratch_demand weights_only = kernels::convolution_backward_weights_scratch<float>(geometry);
    weights_only.merge(kernels::convolution_backward_weights_bf16_scratch(geometry));
    kernels::scratch_demand both = weights_only;
    both.merge(kernels::convolution_backward_input_scratch<float>(geometry));
    both.merge(kernels::convolution_backward_input_bf16_scratch(geometry));
    CHECK(backward_scratch_of<three_by_three, float>(3, true, precision::bf16).region_bytes() == both.region_bytes());
    CHECK(backward_scratch_of<three_by_three, float>(3, false, precision::bf16).region_bytes() ==
          weights_only.region_bytes());
    // In double, or where the pass has no bf16 kernel, bf16 asks what fp32 asks.
    CHECK(forward_scratch_of<three_by_three, double>(3, precision::bf16).region_bytes() ==
          forward_scratch_of<three_by_three, double>(3).region_bytes());
    CHECK(backward_scratch_of<pointwise, float>(3, true, precision::bf16).region_bytes() ==
          backward_scratch_of<pointwise, float>(3, true).region_bytes());
    // A chain asks for its layers' in the precision asked.
    using convolution_chain = layer_for<chain<conv2d<6, 6, 3>, batch_norm<6>, relu>, shape<6, 9, 7>>;
    using first_layer = layer_for<conv2d<6, 6, 3>, shape<6, 9, 7>>;
    CHECK(forward_scratch_of<convolution_chain, float>(3, precision::bf16).region_bytes() ==
          forward_scratch_of<first_layer, float>(3, precision::bf16).region_bytes());
}

TEST_CASE("precision: conv2d in bf16 takes the bf16 kernels where it has them, the float ones elsewhere")
{
    std::mt19937_64 generator(41);
    if (!kernels::bf16_support().amx && !kernels::bf16_support().avx512_bf16) {
        // The refusals, where the CPU cannot: the layer's bf16 passes throw
        // naming the instruction, require_precision says so before a run.
        CHECK_THROWS_AS(require_precision(precision::bf16), std::invalid_argument);
        require_precision(precision::fp32);
        const auto x = random_values<float>(2 * three_by_three::input::size, generator);
        const auto weights = random_values<float>(three_by_three::parameter_count, generator);
        const auto grad_y = random_values<float>(2 * three_by_three::output::size, generator);
        CHECK_THROWS_AS((run_conv2d<three_by_three, float>(precision::bf16, 2, x, weights, grad_y)),
                        std::invalid_argument);
        // The stem's passes and double have none to refuse.
        const auto stem_x = random_values<float>(2 * stem_convolution::input::size, generator);
        const auto stem_weights = random_values<float>(stem_convolution::parameter_count, generator);
        const auto stem_grad = random_values<float>(2 * stem_convolution::output::size, generator);
        CHECK_NOTHROW((run_conv2d<stem_convolution, float>(precision::bf16, 2, stem_x, stem_weights, stem_grad)));
        return;
    }
    require_precision(precision::bf16);
    check_conv2d_in_bf16<three_by_three>(3, generator);
    check_conv2d_in_bf16<strided>(2, generator);
    check_conv2d_in_bf16<pointwise>(2, generator);
    check_conv2d_in_bf16<stem_convolution>(2, generator);
}

TEST_CASE("precision: in double, conv2d computes the same under either precision")
{
    std::mt19937_64 generator(42);
    const auto x = random_values<double>(2 * three_by_three::input::size, generator);
    const auto weights = random_values<double>(three_by_three::parameter_count, generator);
    const auto grad_y = random_values<double>(2 * three_by_three::output::size, generator);
    const auto in_fp32 = run_conv2d<three_by_three, double>(precision::fp32, 2, x, weights, grad_y);
    const auto in_bf16 = run_conv2d<three_by_three, double>(precision::bf16, 2, x, weights, grad_y);
    CHECK(in_fp32.y == in_bf16.y);
    CHECK(in_fp32.grad_x == in_bf16.grad_x);
    CHECK(in_fp32.grad_weights == in_bf16.grad_weights);
}
