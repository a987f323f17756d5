// expected: export_onnx: this layer has no ONNX form (those that have one: conv2d, batch_norm, relu, global_average_pool, flatten, dense and chains of them).
// A user's layer (a per-channel gain, which petra trains and runs) in a
// coupling of a network exported to ONNX, which has no operator for it.
#include <cstddef>
#include <random>
#include <span>

#include <petra/interchange/onnx.hpp>
#include <petra/petra.hpp>

using namespace petra;

struct channel_gain {
    template <class Input>
    struct bind {
        using input = Input;
        using output = Input;
        static constexpr std::size_t parameter_count = Input::channels;
        static constexpr std::size_t state_count = 0;
        static constexpr std::size_t workspace_size(std::size_t) { return 0; }
        static constexpr std::size_t forward_flops = Input::size;
        static constexpr std::size_t backward_flops = 2 * Input::size;

        template <class T>
        static void initialize(std::span<T, parameter_count> gain, std::span<T, 0>, std::mt19937_64&)
        {
            for (T& g : gain) g = T(1);
        }
        template <forward_pass Pass, class T>
        static void forward(Pass, parameters_view<T, parameter_count> gain, state_view<Pass, T, 0>,
                            const_batch<T, input> x, batch_view<T, output> y, std::span<T>)
        {
            for (std::size_t i = 0; i < x.size(); ++i) {
                y.data()[i] = gain[(i / Input::pixels) % Input::channels] * x.data()[i];
            }
        }
        template <class T>
        static void backward(parameters_view<T, parameter_count> gain, const_batch<T, input> x,
                             const_batch<T, output> grad_y, batch_view<T, input> grad_x,
                             std::span<T, parameter_count> grad_gain, std::span<T>)
        {
            for (std::size_t i = 0; i < x.size(); ++i) {
                const std::size_t c = (i / Input::pixels) % Input::channels;
                if (grad_x) grad_x.data()[i] = gain[c] * grad_y.data()[i];
                grad_gain[c] += x.data()[i] * grad_y.data()[i];
            }
        }
    };
};

using gained = network<input<1, 8, 8>, stem<chain<conv2d<1, 16>, batch_norm<16>, relu>>,
                       additive_coupling<chain<conv2d<8, 8>, channel_gain>>, classifier_head<16, 10>>;

int main()
{
    const auto parameters = gained::make_parameters<float>(1);
    return int(onnx_model_bytes(parameters).size());
}
