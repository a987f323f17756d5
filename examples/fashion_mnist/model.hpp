// The networks the job trains (--network), and the figures every other part
// reads from their types rather than writing them out: the image shape, the
// classes, the block count, and the cuts of PETRA's stages.
#pragma once

#include <cstddef>
#include <type_traits>
#include <utility>
#include <vector>

#include <petra/petra.hpp>

namespace fashion {

// The reference network, whose two downsamplings are strided convolutions
// that keep their inputs under PETRA, and its variant with every block
// between stem and head reversible (pixel_unshuffle downsamplings).
using reference_net = petra::reference_network<>;
using reversible_net = petra::reversible_reference_network<>;

// What the data and the stage counts need is the same for both.
using image = reference_net::input;                // channels, height, width of one example
using task = petra::classification<reference_net>; // one logit per class, softmax cross-entropy
inline constexpr std::size_t classes = task::classes;
static_assert(std::is_same_v<reversible_net::input, image>, "Both networks must take the same images.");
static_assert(petra::classification<reversible_net>::classes == classes, "Both networks must have the same classes.");
static_assert(reversible_net::block_count == reference_net::block_count,
              "Both networks must have the same block count: --stages has one range.");

// PETRA's cuts of Net into Stages stages: petra::default_cuts (the
// reference network's calibrated on this machine when scripts/calibrate has
// run, another network's from the built-in cost model).
template <class Net, std::size_t Stages>
inline constexpr petra::stage_cuts<Stages> cuts_of = petra::default_cuts<Net, Stages>();

// The same at run time, stages from 1 to Net's block count: the first block
// of each stage, then the block count.
template <class Net>
std::vector<std::size_t> cuts_at(std::size_t stages)
{
    std::vector<std::size_t> cuts;
    ([&]<std::size_t... J>(std::index_sequence<J...>) {
        ((J + 1 == stages ? (void)cuts.assign(cuts_of<Net, J + 1>.begin(), cuts_of<Net, J + 1>.end()) : void()), ...);
    })(std::make_index_sequence<Net::block_count>{});
    return cuts;
}

} // namespace fashion
