// A block seen through the layer contract, so that the layers' gradient check
// (layers/gradient_check.hpp) applies to it: flat shapes, the block's counts,
// initialisation and forward, its workspace (and room for more) passed as the
// layer cache. Three ways to run the block's backward, one adapter each:
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
    static void initialize(T* parameters, T* state, std::mt19937_64& generator)
    {
        Block::initialize(parameters, state, generator);
    }

    template <class T>
    static void forward(petra::pass mode, std::size_t batch, const T* parameters, T* state, const T* x, T* y,
                        T* cache)
    {
        Block::forward(mode, batch, parameters, state, x, y, cache);
    }

protected:
    template <class T>
    static void poison(T* values, std::size_t count)
    {
        std::fill(values, values + count, std::numeric_limits<T>::quiet_NaN());
    }
};

template <class Block>
struct backward_after_forward : block_as_layer_base<Block> {
    static constexpr std::size_t cache_size(std::size_t batch) { return Block::workspace_size(batch); }

    template <class T>
    static void backward(std::size_t batch, const T* parameters, const T* x, T* cache, const T* grad_y, T* grad_x,
                         T* grad_parameters)
    {
        std::vector<T> state(Block::state_count + 1);
        Block::backward(batch, parameters, state.data(), x, grad_y, grad_x, grad_parameters, cache);
    }
};

template <class Block>
struct recompute_then_backward : block_as_layer_base<Block> {
    static constexpr std::size_t cache_size(std::size_t batch)
    {
        return Block::workspace_size(batch) + batch * Block::output::size;
    }

    template <class T>
    static void backward(std::size_t batch, const T* parameters, const T* x, T* cache, const T* grad_y, T* grad_x,
                         T* grad_parameters)
    {
        block_as_layer_base<Block>::poison(cache, cache_size(batch));
        std::vector<T> state(Block::state_count + 1);
        recompute_backward<Block>(batch, parameters, state.data(), x, grad_y, grad_x, grad_parameters, cache,
                                  cache + Block::workspace_size(batch));
    }
};

template <class Block>
struct reconstruct_then_backward : block_as_layer_base<Block> {
    static constexpr std::size_t cache_size(std::size_t batch)
    {
        return Block::workspace_size(batch) + 2 * batch * Block::output::size;
    }

    template <class T>
    static void backward(std::size_t batch, const T* parameters, const T* x, T* cache, const T* grad_y, T* grad_x,
                         T* grad_parameters)
    {
        const std::size_t count = batch * Block::output::size;
        T* workspace = cache;
        T* y = cache + Block::workspace_size(batch);
        T* reconstructed = y + count;
        std::vector<T> state(Block::state_count + 1);
        Block::forward(pass::recomputation, batch, parameters, state.data(), x, y, workspace);
        block_as_layer_base<Block>::poison(workspace, Block::workspace_size(batch));
        reconstruct_backward<Block>(batch, parameters, state.data(), static_cast<const T*>(y), grad_y,
                                    reconstructed, grad_x, grad_parameters, workspace);
        double error = 0.0;
        for (std::size_t i = 0; i < count; ++i) error = std::max(error, std::abs(double(reconstructed[i] - x[i])));
        CHECK(error < 1e-12);
    }
};

} // namespace petra::test
