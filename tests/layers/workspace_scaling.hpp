// A test layer whose recomputation has no lighter way than its forward
// (recomputation_writes_output, layers/layer.hpp): y = (Numerator /
// Denominator) x, the scale kept in its workspace by forward, which
// backward reads. No parameters, no state, no forward_statistics.
#pragma once

#include <cstddef>
#include <span>

#include <petra/layers/layer.hpp>

namespace petra::test {

template <int Numerator, int Denominator = 1>
struct workspace_scaling {
    template <class Input>
    struct bind : parameter_free {
        using input = Input;
        using output = Input;
        static constexpr std::size_t forward_flops = Input::size;
        static constexpr std::size_t backward_flops = Input::size;
        static constexpr std::size_t workspace_size(std::size_t /*batch*/) { return 1; }

        template <forward_pass Pass, class T>
        static void forward(Pass, parameters_view<T, 0>, state_view<Pass, T, 0>, const_batch<T, input> x,
                            batch_view<T, output> y, std::span<T> workspace)
        {
            workspace[0] = T(Numerator) / T(Denominator);
            for (std::size_t i = 0; i < x.size(); ++i) y.data()[i] = workspace[0] * x.data()[i];
        }
        template <class T>
        static void backward(parameters_view<T, 0>, const_batch<T, input>, const_batch<T, output> grad_y,
                             batch_view<T, input> grad_x, std::span<T, 0>, std::span<T> workspace)
        {
            for (std::size_t i = 0; i < grad_y.size(); ++i) grad_x.data()[i] = workspace[0] * grad_y.data()[i];
        }
    };
};

} // namespace petra::test
