// The reference network: one network for every benchmark and the main
// example, so that figures stay comparable over time. For a 1 x 28 x 28 image:
//   stem: conv3x3 1 -> 2 Width, batch norm, ReLU, split into two halves of
//         Width channels;
//   at 28 x 28, 14 x 14 and 7 x 7: BlocksPerResolution additive couplings
//         whose F is conv3x3, batch norm, ReLU, conv3x3, batch norm, ReLU;
//   between resolutions: downsampling (stride 2, channels of both halves
//         doubled);
//   head: the halves concatenated, global average pooling, dense to Classes.
// With the defaults (Width 16, 2 blocks per resolution): 222,058 parameters.
// The same architecture with a bias in every convolution has 672 more
// (222,730); here convolutions have none, since the batch normalisation that
// follows each one removes any constant shift (a bias would get a zero
// gradient).
#pragma once

#include <cstddef>

#include <petra/blocks.hpp>
#include <petra/layers.hpp>
#include <petra/network.hpp>

namespace petra {

// F of the reference network's couplings, on C channels.
template <std::size_t C>
using residual_function = chain<conv2d<C, C, 3>, batch_norm<C>, relu, conv2d<C, C, 3>, batch_norm<C>, relu>;

template <std::size_t Width = 16, std::size_t BlocksPerResolution = 2, std::size_t Classes = 10>
using reference_network =
    network<input<1, 28, 28>, stem<chain<conv2d<1, 2 * Width, 3>, batch_norm<2 * Width>, relu>>,
            repeated<BlocksPerResolution, additive_coupling<residual_function<Width>>>, downsampling<Width>,
            repeated<BlocksPerResolution, additive_coupling<residual_function<2 * Width>>>, downsampling<2 * Width>,
            repeated<BlocksPerResolution, additive_coupling<residual_function<4 * Width>>>,
            classifier_head<8 * Width, Classes>>;

} // namespace petra
