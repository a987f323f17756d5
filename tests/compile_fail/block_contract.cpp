// expected: This block says it is reversible but has no inverse the block contract (blocks/block.hpp) can call: inverse(parameters, state, y, x, workspace).
// A user's block that says it is reversible but has no inverse.
#include <cstddef>
#include <random>
#include <span>

#include <petra/petra.hpp>

using namespace petra;

struct scaling : block_kind {
    template <class Input>
    static constexpr bool accepts = is_halves<Input>::value;

    template <class Input>
    struct bind {
        using input = Input;
        using output = Input;
        static constexpr bool reversible = true;
        static constexpr std::size_t parameter_count = 0;
        static constexpr std::size_t state_count = 0;
        static constexpr std::size_t forward_flops = Input::size;
        static constexpr std::size_t backward_flops = Input::size;
        static constexpr std::size_t workspace_size(std::size_t) { return 0; }

        template <class T>
        static void initialize(std::span<T, 0>, std::span<T, 0>, std::mt19937_64&)
        {
        }
        template <forward_pass Pass, class T>
        static void forward(Pass, parameters_view<T, 0>, state_view<Pass, T, 0>, const_batch<T, input> x,
                            batch_view<T, output> y, std::span<T>)
        {
            for (std::size_t i = 0; i < x.size(); ++i) y.data()[i] = 2 * x.data()[i];
        }
        template <class T>
        static void backward(parameters_view<T, 0>, const_batch<T, input>, const_batch<T, output> grad_y,
                             batch_view<T, input> grad_x, std::span<T, 0>, std::span<T>)
        {
            for (std::size_t i = 0; i < grad_y.size(); ++i) grad_x.data()[i] = 2 * grad_y.data()[i];
        }
    };
};

using broken = network<input<1, 8, 8>, stem<chain<conv2d<1, 16>, batch_norm<16>, relu>>, scaling,
                       classifier_head<16, 10>>;

int main() { return int(broken::parameter_count); }
