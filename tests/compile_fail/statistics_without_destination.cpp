// expected: A layer that takes its input's statistics (takes_input_statistics) must provide input_statistics
// A user's normalisation that says a chain may give it the batch statistics
// of its input (takes_input_statistics) but names no place for them
// (input_statistics) nor a forward that takes them as given.
#include <cstddef>
#include <span>

#include <petra/core.hpp>

using namespace petra;

struct centring {
    template <class Input>
    struct bind : parameter_free {
        using input = Input;
        using output = Input;
        static constexpr std::size_t forward_flops = Input::size;
        static constexpr std::size_t backward_flops = Input::size;
        static constexpr bool takes_input_statistics = true;

        template <forward_pass Pass, class T>
        static void forward(Pass, parameters_view<T, 0>, state_view<Pass, T, 0>, const_batch<T, input> x,
                            batch_view<T, output> y, std::span<T>)
        {
            for (std::size_t i = 0; i < x.size(); ++i) y.data()[i] = x.data()[i];
        }
        template <class T>
        static void backward(parameters_view<T, 0>, const_batch<T, input>, const_batch<T, output> grad_y,
                             batch_view<T, input> grad_x, std::span<T, 0>, std::span<T>)
        {
            if (!grad_x) return;
            for (std::size_t i = 0; i < grad_y.size(); ++i) grad_x.data()[i] = grad_y.data()[i];
        }
    };
};

using broken = layer_for<chain<conv2d<8, 8>, centring>, shape<8, 8, 8>>;

int main() { return int(broken::gives_statistics[0]); }
