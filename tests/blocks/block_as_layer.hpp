// A block seen through the layer contract, so that the layers' gradient check
// (layers/gradient_check.hpp) applies to it: flat shapes, the block's counts,
// initialisation and forward, its workspace passed as the layer cache.
// Adapters derive from this and add cache_size and backward.
#pragma once

#include <cstddef>
#include <random>

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
};

} // namespace petra::test
