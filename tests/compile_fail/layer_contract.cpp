// expected: This layer's forward cannot be called as the layer contract (layers/layer.hpp) calls it: forward(pass, parameters, state, x, y, workspace), x and y batch views, for every pass.
// A user's layer written against raw pointers and a batch size, not the views
// and the argument order of layers/layer.hpp.
#include <cstddef>

#include <petra/core.hpp>

using namespace petra;

struct doubling {
    template <class Input>
    struct bind : parameter_free {
        using input = Input;
        using output = Input;
        static constexpr std::size_t forward_flops = Input::size;
        static constexpr std::size_t backward_flops = Input::size;

        template <class T>
        static void forward(pass::training_t, std::size_t batch, const T* x, T* y)
        {
            for (std::size_t i = 0; i < batch * Input::size; ++i) y[i] = 2 * x[i];
        }
    };
};

using broken = network<input<1, 8, 8>, stem<chain<conv2d<1, 16>, batch_norm<16>, doubling>>, classifier_head<16, 10>>;

int main() { return int(broken::parameter_count); }
