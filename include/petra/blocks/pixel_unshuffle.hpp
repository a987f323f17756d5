// Invertible downsampling, space to depth, on a pair of halves: each half's
// 2 x 2 neighbourhoods become channels,
//   y[4 c + 2 dy + dx][i][j] = x[c][2 i + dy][2 j + dx],
// from halves<shape<C, H, W>> to halves<shape<4 C, H / 2, W / 2>>. No
// parameters and no arithmetic: a permutation, so its inverse is exact and
// its backward is the inverse permutation of the gradient. Reversible: in
// PETRA its stage rebuilds its input instead of keeping it, so a network
// that downsamples this way keeps no activations between its stem and its
// head (models/reversible_reference_network.hpp).
#pragma once

#include <cstddef>
#include <random>
#include <span>

#include <petra/batch_view.hpp>
#include <petra/blocks/block.hpp>
#include <petra/layers/layer.hpp>
#include <petra/shape.hpp>

namespace petra {

namespace detail {

// The permutation on `images` NCHW images of Channels x Height x Width:
// to space-to-depth (Unshuffle) or back.
template <bool Unshuffle, std::size_t Channels, std::size_t Height, std::size_t Width, class T>
void pixel_shuffle_images(std::size_t images, const T* from, T* to)
{
    constexpr std::size_t out_height = Height / 2, out_width = Width / 2;
    for (std::size_t n = 0; n < images; ++n) {
        for (std::size_t c = 0; c < Channels; ++c) {
            const std::size_t plane = (n * Channels + c) * Height * Width;
            for (std::size_t dy = 0; dy < 2; ++dy) {
                for (std::size_t dx = 0; dx < 2; ++dx) {
                    const std::size_t depth_plane = (n * 4 * Channels + 4 * c + 2 * dy + dx) * out_height * out_width;
                    for (std::size_t i = 0; i < out_height; ++i) {
                        for (std::size_t j = 0; j < out_width; ++j) {
                            const std::size_t spatial = plane + (2 * i + dy) * Width + 2 * j + dx;
                            const std::size_t depth = depth_plane + i * out_width + j;
                            if constexpr (Unshuffle) {
                                to[depth] = from[spatial];
                            } else {
                                to[spatial] = from[depth];
                            }
                        }
                    }
                }
            }
        }
    }
}

} // namespace detail

struct pixel_unshuffle : block_kind {
    template <class Input>
    static constexpr bool accepts = [] {
        if constexpr (is_halves<Input>::value) {
            return Input::half::height % 2 == 0 && Input::half::width % 2 == 0;
        } else {
            return false;
        }
    }();

    template <class Input>
    struct bind {
        using unbound = pixel_unshuffle;
        using half = typename half_of<Input>::type;
        static_assert(half::height % 2 == 0 && half::width % 2 == 0,
                      "pixel_unshuffle: the halves' height and width must be even.");
        using input = Input;
        using output = halves<shape<4 * half::channels, half::height / 2, half::width / 2>>;
        static constexpr bool reversible = true;
        static constexpr std::size_t parameter_count = 0;
        static constexpr std::size_t state_count = 0;
        static constexpr std::size_t forward_flops = 0;
        static constexpr std::size_t backward_flops = 0;
        static constexpr std::size_t workspace_size(std::size_t /*batch*/) { return 0; }

        template <class T>
        static void initialize(std::span<T, 0>, std::span<T, 0>, std::mt19937_64&)
        {}

        // Both halves at once: stored half-major, they are 2 x batch
        // ordinary images of the half's shape.
        template <forward_pass Pass, class T>
        static void forward(Pass, parameters_view<T, 0>, state_view<Pass, T, 0>, const_batch<T, input> x,
                            batch_view<T, output> y, std::span<T>)
        {
            detail::pixel_shuffle_images<true, half::channels, half::height, half::width>(2 * x.batch(), x.data(),
                                                                                          y.data());
        }

        template <class T>
        static void inverse(parameters_view<T, 0>, state_view<pass::recomputation_t, T, 0>, const_batch<T, output> y,
                            batch_view<T, input> x, std::span<T>)
        {
            detail::pixel_shuffle_images<false, half::channels, half::height, half::width>(2 * x.batch(), y.data(),
                                                                                           x.data());
        }

        template <class T>
        static void backward(parameters_view<T, 0>, const_batch<T, input>, const_batch<T, output> grad_y,
                             batch_view<T, input> grad_x, std::span<T, 0>, std::span<T>)
        {
            if (grad_x) {
                detail::pixel_shuffle_images<false, half::channels, half::height, half::width>(
                    2 * grad_x.batch(), grad_y.data(), grad_x.data());
            }
        }
    };
};

} // namespace petra
