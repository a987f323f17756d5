// expected: A layer that maps its output (maps_output) must keep its input's shape.
// A user's layer that says a chain may read its output through a map
// (maps_output) while it doubles the channels: a map cannot stand for it.
#include <cstddef>
#include <span>

#include <petra/core.hpp>

using namespace petra;

struct channel_doubling {
    template <class Input>
    struct bind : parameter_free {
        using input = Input;
        using output = shape<2 * Input::channels, Input::height, Input::width>;
        static constexpr std::size_t forward_flops = output::size;
        static constexpr std::size_t backward_flops = output::size;
        static constexpr bool maps_output = true;

        template <forward_pass Pass, class T>
        static void forward(Pass, parameters_view<T, 0>, state_view<Pass, T, 0>, const_batch<T, input> x,
                            batch_view<T, output> y, std::span<T>)
        {
            for (std::size_t n = 0; n < x.batch(); ++n) {
                for (std::size_t i = 0; i < output::size; ++i) {
                    y.data()[n * output::size + i] = x.data()[n * Input::size + i % Input::size];
                }
            }
        }
        template <class T>
        static void backward(parameters_view<T, 0>, const_batch<T, input> x, const_batch<T, output> grad_y,
                             batch_view<T, input> grad_x, std::span<T, 0>, std::span<T>)
        {
            if (!grad_x) return;
            for (std::size_t n = 0; n < x.batch(); ++n) {
                for (std::size_t i = 0; i < Input::size; ++i) {
                    grad_x.data()[n * Input::size + i] =
                        grad_y.data()[n * output::size + i] + grad_y.data()[n * output::size + Input::size + i];
                }
            }
        }
    };
};

using broken = layer_for<chain<conv2d<1, 8>, channel_doubling, conv2d<16, 16>>, shape<1, 8, 8>>;

int main() { return int(broken::parameter_count); }
