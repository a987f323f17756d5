// A block seen through the layer contract, so that the layers' gradient check
// (layers/gradient_check.hpp) applies to it: flat shapes, the block's counts,
// initialisation and forward, its workspace (and room for more) passed as the
// layer workspace. Three ways to run the block's backward, one adapter each:
//   backward_after_forward: backward with what forward left in the workspace
//                           (exact backprop);
//   recompute_then_backward: recompute_backward from the stored input, on a
//                           workspace poisoned with NaN first (a block that is
//                           not reversible, in a pipeline);
//   reconstruct_then_backward: the fused reconstruct_backward from the output,
//                           on a poisoned workspace, checking that it gives
//                           the input back (a reversible block, in PETRA).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <random>
#include <span>
#include <vector>

#include <doctest/doctest.h>

#include <petra/blocks/block.hpp>
#include <petra/layers/layer.hpp>

namespace petra::test {

template <class Block>
struct block_as_layer_base {
    using input = petra::shape<Block::input::size>;
    using output = petra::shape<Block::output::size>;
    static constexpr std::size_t parameter_count = Block::parameter_count;
    static constexpr std::size_t state_count = Block::state_count;

    template <class T>
    static void initialize(std::span<T, parameter_count> parameters, std::span<T, state_count> state,
                           std::mt19937_64& generator)
    {
        Block::initialize(parameters, state, generator);
    }

    template <petra::forward_pass Pass, class T>
    static void forward(Pass mode, petra::parameters_view<T, parameter_count> parameters,
                        petra::state_view<Pass, T, state_count> state, petra::const_batch<T, input> x,
                        petra::batch_view<T, output> y, std::span<T> workspace)
    {
        Block::forward(mode, parameters, state, x.template as<typename Block::input>(),
                       y.template as<typename Block::output>(), workspace);
    }

protected:
    template <class T>
    static void poison(std::span<T> values)
    {
        std::fill(values.begin(), values.end(), std::numeric_limits<T>::quiet_NaN());
    }
    // Running statistics the gradient check does not look at: the backward
    // paths below run recomputation passes, which only read them.
    template <class T>
    static std::span<const T, state_count> unused_statistics()
    {
        static const std::vector<T> values(state_count + 1, T(1));
        return std::span<const T, state_count>(values.data(), state_count);
    }
};

template <class Block>
struct backward_after_forward : block_as_layer_base<Block> {
    using base = block_as_layer_base<Block>;
    static constexpr std::size_t workspace_size(std::size_t batch) { return Block::workspace_size(batch); }

    template <class T>
    static void backward(petra::parameters_view<T, base::parameter_count> parameters,
                         petra::const_batch<T, typename base::input> x,
                         petra::const_batch<T, typename base::output> grad_y,
                         petra::batch_view<T, typename base::input> grad_x,
                         std::span<T, base::parameter_count> grad_parameters, std::span<T> workspace)
    {
        Block::backward(parameters, x.template as<typename Block::input>(),
                        grad_y.template as<typename Block::output>(), grad_x.template as<typename Block::input>(),
                        grad_parameters, workspace);
    }
};

template <class Block>
struct recompute_then_backward : block_as_layer_base<Block> {
    using base = block_as_layer_base<Block>;
    static constexpr std::size_t workspace_size(std::size_t batch)
    {
        return Block::workspace_size(batch) + batch * Block::output::size;
    }

    template <class T>
    static void backward(petra::parameters_view<T, base::parameter_count> parameters,
                         petra::const_batch<T, typename base::input> x,
                         petra::const_batch<T, typename base::output> grad_y,
                         petra::batch_view<T, typename base::input> grad_x,
                         std::span<T, base::parameter_count> grad_parameters, std::span<T> workspace)
    {
        base::poison(workspace);
        const std::size_t batch = x.batch();
        recompute_backward<Block>(
            parameters, base::template unused_statistics<T>(), x.template as<typename Block::input>(),
            grad_y.template as<typename Block::output>(), grad_x.template as<typename Block::input>(), grad_parameters,
            workspace.first(Block::workspace_size(batch)),
            petra::batch_view<T, typename Block::output>(workspace.data() + Block::workspace_size(batch), batch));
    }
};

template <class Block>
struct reconstruct_then_backward : block_as_layer_base<Block> {
    using base = block_as_layer_base<Block>;
    static constexpr std::size_t workspace_size(std::size_t batch)
    {
        return Block::workspace_size(batch) + 2 * batch * Block::output::size;
    }

    template <class T>
    static void backward(petra::parameters_view<T, base::parameter_count> parameters,
                         petra::const_batch<T, typename base::input> x,
                         petra::const_batch<T, typename base::output> grad_y,
                         petra::batch_view<T, typename base::input> grad_x,
                         std::span<T, base::parameter_count> grad_parameters, std::span<T> scratch)
    {
        const std::size_t batch = x.batch();
        const std::span<T> workspace = scratch.first(Block::workspace_size(batch));
        const petra::batch_view<T, typename Block::output> y(workspace.data() + workspace.size(), batch);
        const petra::batch_view<T, typename Block::input> reconstructed(y.data() + y.size(), batch);
        const auto block_x = x.template as<typename Block::input>();
        Block::forward(petra::pass::recomputation, parameters, base::template unused_statistics<T>(), block_x, y,
                       workspace);
        base::poison(workspace);
        reconstruct_backward<Block>(parameters, base::template unused_statistics<T>(), y,
                                    grad_y.template as<typename Block::output>(), reconstructed,
                                    grad_x.template as<typename Block::input>(), grad_parameters, workspace);
        double error = 0.0;
        for (std::size_t i = 0; i < reconstructed.size(); ++i) {
            error = std::max(error, std::abs(double(reconstructed.data()[i] - block_x.data()[i])));
        }
        CHECK(error < 1e-12);
    }
};

} // namespace petra::test
