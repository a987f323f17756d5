// The blocks that change shape (stem, downsampling, head): their shapes, and
// their backward, which recomputes from the stored input, against central
// differences in double.
#include <cstddef>
#include <random>
#include <vector>

#include <doctest/doctest.h>

#include <petra/blocks.hpp>
#include <petra/layers.hpp>

#include "layers/gradient_check.hpp"

using namespace petra;

namespace {

// A shape-changing block seen through the layer contract, so that the
// gradient check of the layers applies; its cache is the block's workspace.
template <class Block>
struct block_as_layer {
    using input = shape<Block::input::size>;
    using output = shape<Block::output::size>;
    static constexpr std::size_t parameter_count = Block::parameter_count;
    static constexpr std::size_t state_count = Block::state_count;
    static constexpr std::size_t cache_size(std::size_t batch) { return Block::workspace_size(batch); }

    template <class T>
    static void initialize(T* parameters, T* state, std::mt19937_64& generator)
    {
        Block::initialize(parameters, state, generator);
    }

    template <class T>
    static void forward(pass mode, std::size_t batch, const T* parameters, T* state, const T* x, T* y, T* cache)
    {
        Block::forward(mode, batch, parameters, state, x, y, cache);
    }

    template <class T>
    static void backward(std::size_t batch, const T* parameters, const T* x, T* cache, const T* grad_y, T* grad_x,
                         T* grad_parameters)
    {
        std::vector<T> state(Block::state_count + 1);
        Block::backward(batch, parameters, state.data(), x, grad_y, grad_x, grad_parameters, cache);
    }
};

using image = shape<1, 6, 6>;
using stem_block = layer_for<stem<chain<conv2d<1, 8, 3>, batch_norm<8>, relu>>, image>;
using downsample_block = layer_for<downsampling<4>, stem_block::output>;
using head_block = layer_for<classifier_head<16, 10>, downsample_block::output>;

} // namespace

TEST_CASE("shape-changing blocks: shapes chain from the image to the logits")
{
    static_assert(std::is_same_v<stem_block::output, halves<shape<4, 6, 6>>>);
    static_assert(std::is_same_v<downsample_block::output, halves<shape<8, 3, 3>>>);
    static_assert(std::is_same_v<head_block::output, shape<10>>);
    static_assert(!stem_block::reversible && !downsample_block::reversible && !head_block::reversible);
    static_assert(downsample_block::parameter_count == (8 * 4 * 9 + 16) + (8 * 4 + 16));
    static_assert(head_block::parameter_count == 16 * 10 + 10);
}

TEST_CASE("halves: splitting channels in two and merging them back is exact")
{
    const std::size_t batch = 3, half_size = 5;
    std::vector<int> whole(2 * batch * half_size), pair(whole.size()), back(whole.size());
    for (std::size_t i = 0; i < whole.size(); ++i) whole[i] = int(i);
    split_into_halves(batch, half_size, whole.data(), pair.data());
    // Example 1's second half (values 15..19) is the second half's second example.
    CHECK(pair[(batch + 1) * half_size] == 15);
    merge_halves(batch, half_size, pair.data(), back.data());
    CHECK(back == whole);
}

TEST_CASE("shape-changing blocks: backward from the stored input matches central differences")
{
    std::mt19937_64 generator(11);
    test::check_gradients<block_as_layer<stem_block>>(generator, {.batch = 2});
    test::check_gradients<block_as_layer<downsample_block>>(generator, {.batch = 2});
    test::check_gradients<block_as_layer<head_block>>(generator, {.batch = 3});
}
