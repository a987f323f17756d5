// expected: export_onnx: this block has no ONNX form (those that have one: stem, additive_coupling, revnet_coupling, downsample, pixel_unshuffle and head).
// A user's block (both halves doubled, keeping its input as a block that is
// not reversible does), which petra trains and runs, in a network exported to
// ONNX, which has no form for it.
#include <cstddef>
#include <random>
#include <span>

#include <petra/interchange/onnx.hpp>
#include <petra/petra.hpp>

using namespace petra;

struct scaling : block_kind {
    template <class Input>
    static constexpr bool accepts = is_halves<Input>::value;

    template <class Input>
    struct bind {
        using input = Input;
        using output = Input;
        static constexpr bool reversible = false;
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

using doubled = network<input<1, 8, 8>, stem<chain<conv2d<1, 16>, batch_norm<16>, relu>>, scaling,
                        classifier_head<16, 10>>;

int main()
{
    const auto parameters = doubled::make_parameters<float>(1);
    return int(onnx_model_bytes(parameters).size());
}
