// Where the activations between blocks, or their gradients, sit in one
// buffer, so that a block that passes its input's first half on as its
// output's second half (passes_first_half_through, blocks/block.hpp: the
// additive coupling's y~ = x, its inverse's x = y~ and its backward's
// dL/dx~ = dL/dy) finds that half in place and copies nothing.
//
// Boundaries 0 to M - 1 are the activations (or gradients) a sequence of
// blocks passes on, in the network's order, with sizes[i] values per
// example; shares_half[i] says that boundaries i - 1 and i are the input
// and output of such a block (they then have the same, even, size). A run of
// boundaries joined so is a chain. A chain of k + 1 boundaries of size 2h
// takes a region of 2h + k h values per example, each boundary h from the
// one before:
// - later_below: each boundary h below the one before (a forward's
//   activations, and the inputs an inverse rebuilds: y = x - h, so y's
//   second half is x's first);
// - later_above: each h above (gradients: dL/dx = dL/dy - h, so dL/dx's
//   second half is dL/dy's first).
// Placement:
// - every_boundary_kept: the chains' regions end to end (exact backprop's
//   activations, the last stage's kept inputs); a network without such
//   blocks keeps its boundaries end to end, as before;
// - neighbours_apart: only a boundary and the next are live together (a
//   block's input and output, or their gradients), so each chain goes as
//   low as it can without its first boundary overlapping the last of the
//   chain before it (at the buffer's start if they miss each other, else
//   just above that boundary): the activations a stage passes between its
//   blocks, gradients. A chain holds at most three boundaries there (a
//   fourth starts a new one, and its block copies the half): three of size
//   2h take 4h, and the next chain of that size fits in the same 4h, so a
//   run of couplings takes the two activations two alternating buffers
//   would, however long the run. Where this placement would take more than
//   two alternating places of the largest chain's region (boundaries of
//   growing sizes), the chains take those instead; without such blocks,
//   that is two alternating buffers of the largest boundary, as before.
// Offsets and sizes are in values per example: every size is linear in the
// batch, so a batch of B examples multiplies them by B.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>

namespace petra::detail {

enum class half_order { later_below, later_above };
enum class boundary_placement { every_boundary_kept, neighbours_apart };

template <std::size_t M>
struct boundary_layout {
    std::array<std::size_t, M> offset{}; // of each boundary, from the buffer's start
    std::size_t size = 0;                // of the buffer
};

template <std::size_t M>
constexpr boundary_layout<M> lay_out_boundaries(const std::array<std::size_t, M>& sizes,
                                                const std::array<bool, M>& shares_half, half_order order,
                                                boundary_placement placement)
{
    // Chain c: its first boundary first[c], its boundaries count[c], its region region[c].
    std::array<std::size_t, M> chain_of{}, first{}, count{}, region{};
    std::size_t chains = 0;
    for (std::size_t i = 0; i < M; ++i) {
        const bool joined = i > 0 && shares_half[i] && sizes[i] == sizes[i - 1] && sizes[i] % 2 == 0 &&
                            (placement == boundary_placement::every_boundary_kept || count[chains - 1] < 3);
        if (!joined) first[chains++] = i;
        const std::size_t c = chains - 1;
        chain_of[i] = c;
        ++count[c];
        region[c] = sizes[first[c]] + (count[c] - 1) * (sizes[first[c]] / 2);
    }
    std::array<std::size_t, M> base{};
    boundary_layout<M> layout;
    // Boundary i's offset once its chain's base is known.
    const auto offset_of = [&](std::size_t i) {
        const std::size_t c = chain_of[i], position = i - first[c], half = sizes[first[c]] / 2;
        const std::size_t steps = order == half_order::later_below ? count[c] - 1 - position : position;
        return base[c] + steps * half;
    };
    std::size_t largest_region = 0;
    for (std::size_t c = 0; c < chains; ++c) {
        largest_region = std::max(largest_region, region[c]);
        if (placement == boundary_placement::every_boundary_kept) {
            base[c] = layout.size;
        } else if (c > 0) {
            // At the start, or else where its first boundary begins as the
            // last of the chain before ends.
            const std::size_t last = first[c] - 1;
            const std::size_t last_begin = offset_of(last), last_end = last_begin + sizes[last];
            base[c] = 0;
            const std::size_t first_from = offset_of(first[c]);
            if (first_from < last_end && last_begin < first_from + sizes[first[c]]) base[c] = last_end - first_from;
        }
        layout.size = std::max(layout.size, base[c] + region[c]);
    }
    // Where that takes more than two alternating places of the largest
    // region would (boundaries of growing sizes), those.
    if (placement == boundary_placement::neighbours_apart &&
        std::min<std::size_t>(chains, 2) * largest_region < layout.size) {
        for (std::size_t c = 0; c < chains; ++c) base[c] = (c % 2) * largest_region;
        layout.size = std::min<std::size_t>(chains, 2) * largest_region;
    }
    for (std::size_t i = 0; i < M; ++i) layout.offset[i] = offset_of(i);
    return layout;
}

// The layout of Network's block boundaries First to First + Count - 1:
// boundary b is block b's input (b = block_count: the network's output),
// of the size Network::profile gives; boundary b joins the one before it in
// the range where block b - 1 passes its first half through. A boundary b
// for which takes_room(b) is false lives elsewhere and takes no room here
// (size 0).
template <class Network, std::size_t First, std::size_t Count, class TakesRoom>
constexpr boundary_layout<Count> lay_out_block_boundaries(half_order order, boundary_placement placement,
                                                          TakesRoom takes_room)
{
    std::array<std::size_t, Count> sizes{};
    std::array<bool, Count> shares_half{};
    for (std::size_t k = 0; k < Count; ++k) {
        const std::size_t b = First + k;
        const std::size_t values =
            b < Network::block_count ? Network::profile[b].input_values : Network::profile[b - 1].output_values;
        sizes[k] = takes_room(b) ? values : 0;
        shares_half[k] = k > 0 && Network::profile[b - 1].passes_first_half_through;
    }
    return lay_out_boundaries(sizes, shares_half, order, placement);
}
template <class Network, std::size_t First, std::size_t Count>
constexpr boundary_layout<Count> lay_out_block_boundaries(half_order order, boundary_placement placement)
{
    return lay_out_block_boundaries<Network, First, Count>(order, placement, [](std::size_t) { return true; });
}

} // namespace petra::detail
