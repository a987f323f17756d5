// The stage partitioner (floor 6): cuts a network's block list into J
// contiguous, non-empty stages so that the most expensive stage is as cheap
// as it can be. A pipeline runs as fast as its slowest stage, so that is the
// quantity to minimise.
//
// Cut points: an array cuts of J + 1 values with cuts[0] = 0 < cuts[1] < ...
// < cuts[J] = block count; stage j holds blocks [cuts[j], cuts[j + 1]).
//
//   constexpr auto cuts = partition<net, 4>();      // balanced on the built-in cost model
//   constexpr auto tuned = partition<net, 4>(measured);  // or on stage costs measured here (scripts/calibrate)
//   constexpr stage_cuts<2> mine{0, 6, 10};          // or by hand
//   static_assert(valid_cuts<net>(mine));
//
// A block's cost is what a stage spends on it per tick (block_profile::
// tick_cost): forward, reconstruction (or recomputation) and backward FLOPs
// per example (the last stage reconstructs nothing: last_stage_tick_cost),
// those of Winograd-form convolutions priced lower, plus a term for the
// memory traffic of its memory-bound layers, without which FLOPs alone
// mis-balance the reference network in two stages by a third
// (bench/RESULTS.md). Costs measured as stages (stage_range_costs: what
// every run of blocks costs as a stage, which is not the sum of its blocks'
// costs) go to partition(measured); one cost per block, to balanced_cuts.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <petra/error.hpp>
#include <petra/network.hpp>

namespace petra {

template <std::size_t Stages>
using stage_cuts = std::array<std::size_t, Stages + 1>;

namespace detail {

// The cuts of Stages contiguous non-empty stages over Blocks blocks that
// minimise the largest stage cost, where stage_cost(first, end, last) is
// what blocks [first, end) cost as a stage (as the pipeline's last stage
// when `last`). Among equally good cuts, the last stage starts as late as
// possible, then the one before it, and so on. Dynamic programming over
// (stages, blocks): O(Stages * Blocks^2) calls, at compile time.
template <std::size_t Stages, std::size_t Blocks, class StageCost>
constexpr stage_cuts<Stages> balanced_cuts_by(StageCost stage_cost)
{
    static_assert(Stages >= 1, "A pipeline needs at least one stage.");
    static_assert(Stages <= Blocks, "A pipeline cannot have more stages than the network has blocks.");
    using Cost = decltype(stage_cost(std::size_t{}, std::size_t{}, bool{}));
    // worst[s][i]: the smallest possible largest stage cost of the first i
    // blocks in s + 1 stages (the last of them priced as the pipeline's last
    // stage when s + 1 == Stages); last_start[s][i]: where its last stage
    // begins (the latest start among the optimal ones). Only the i that
    // leave every later stage a block are visited, and the pipeline's last
    // stage only ends at the network's end: stage_cost is never asked for
    // a stage no cuts hold.
    constexpr Cost unreachable = std::numeric_limits<Cost>::max();
    std::array<std::array<Cost, Blocks + 1>, Stages> worst{};
    std::array<std::array<std::size_t, Blocks + 1>, Stages> last_start{};
    for (std::size_t s = 0; s < Stages; ++s) {
        const bool last = s + 1 == Stages;
        const std::size_t highest = Blocks - (Stages - 1 - s);
        for (std::size_t i = last ? Blocks : s + 1; i <= highest; ++i) {
            if (s == 0) {
                worst[0][i] = stage_cost(0, i, last);
                continue;
            }
            worst[s][i] = unreachable;
            // The stage is blocks [start, i); the first s stages need at
            // least s blocks.
            for (std::size_t start = s; start < i; ++start) {
                const Cost candidate = std::max(worst[s - 1][start], stage_cost(start, i, last));
                if (candidate <= worst[s][i]) {
                    worst[s][i] = candidate;
                    last_start[s][i] = start;
                }
            }
        }
    }
    stage_cuts<Stages> cuts{};
    cuts[Stages] = Blocks;
    for (std::size_t s = Stages - 1; s > 0; --s) cuts[s] = last_start[s][cuts[s + 1]];
    cuts[0] = 0;
    return cuts;
}

} // namespace detail

// The cuts of Stages contiguous non-empty stages over costs.size() blocks
// that minimise the largest stage cost (the sum of its blocks' costs), where
// the blocks of the last stage cost last_stage_costs instead (the last stage
// of PETRA reconstructs nothing). Among equally good cuts, the last stage
// starts as late as possible, then the one before it, and so on. Needs
// 1 <= Stages <= costs.size().
template <std::size_t Stages, class Cost, std::size_t N>
constexpr stage_cuts<Stages> balanced_cuts(const std::array<Cost, N>& costs,
                                           const std::array<Cost, N>& last_stage_costs)
{
    std::array<Cost, N + 1> prefix{}, last_prefix{};
    for (std::size_t i = 0; i < N; ++i) {
        prefix[i + 1] = prefix[i] + costs[i];
        last_prefix[i + 1] = last_prefix[i] + last_stage_costs[i];
    }
    return detail::balanced_cuts_by<Stages, N>([&](std::size_t first, std::size_t end, bool last) {
        const auto& sums = last ? last_prefix : prefix;
        return sums[end] - sums[first];
    });
}

// The same with every stage priced alike.
template <std::size_t Stages, class Cost, std::size_t N>
constexpr stage_cuts<Stages> balanced_cuts(const std::array<Cost, N>& costs)
{
    return balanced_cuts<Stages>(costs, costs);
}

// Per-tick cost of every block of Network, in a stage before the last and
// in the last stage.
template <class Network>
constexpr std::array<std::size_t, Network::block_count> tick_costs()
{
    std::array<std::size_t, Network::block_count> costs{};
    for (std::size_t i = 0; i < Network::block_count; ++i) costs[i] = Network::profile[i].tick_cost();
    return costs;
}
template <class Network>
constexpr std::array<std::size_t, Network::block_count> last_stage_tick_costs()
{
    std::array<std::size_t, Network::block_count> costs{};
    for (std::size_t i = 0; i < Network::block_count; ++i) costs[i] = Network::profile[i].last_stage_tick_cost();
    return costs;
}

// Balanced cuts of Network into Stages stages.
template <class Network, std::size_t Stages>
constexpr stage_cuts<Stages> partition()
{
    static_assert(is_network<Network>::value, "partition needs a network<input<C, H, W>, Block...>.");
    return balanced_cuts<Stages>(tick_costs<Network>(), last_stage_tick_costs<Network>());
}

// Costs of every block measured on a machine (bench_blocks' block:I/tick
// and block:I/last_stage_tick): what a stage before the last spends on the
// block per micro-batch, and what the last stage spends, in any one unit. A
// stage is priced at the sum of its blocks' costs, which a stage's tick is
// not (stage_range_costs below measures stages; scripts/calibrate writes
// those).
template <std::size_t Blocks>
struct block_costs {
    std::array<std::size_t, Blocks> tick;
    std::array<std::size_t, Blocks> last_stage_tick;
};

// Balanced cuts of Network into Stages stages on measured costs.
template <class Network, std::size_t Stages>
constexpr stage_cuts<Stages> partition(const block_costs<Network::block_count>& measured)
{
    static_assert(is_network<Network>::value, "partition needs a network<input<C, H, W>, Block...>.");
    return balanced_cuts<Stages>(measured.tick, measured.last_stage_tick);
}

// What every contiguous run of a network's blocks costs as a stage,
// measured on a machine (bench_blocks' "blocks:" benchmarks; scripts/
// calibrate writes them to a header), in any one unit: stage[first][last]
// is blocks first to last (last < Blocks - 1) as a stage before the
// pipeline's last, last_stage[first] blocks first to Blocks - 1 as its last
// stage; entries with last < first are not read. A stage's tick is not the
// sum of its blocks' ticks timed one by one (bench/RESULTS.md, "Stage
// ticks and cuts"): these are what the partitioner balances best.
template <std::size_t Blocks>
struct stage_range_costs {
    std::array<std::array<std::size_t, Blocks>, Blocks> stage;
    std::array<std::size_t, Blocks> last_stage;

    // What blocks [first, end) cost as a stage; the last stage ends at Blocks.
    constexpr std::size_t operator()(std::size_t first, std::size_t end, bool last) const
    {
        return last ? last_stage[first] : stage[first][end - 1];
    }
};

// Balanced cuts of Network into Stages stages on measured stage costs.
template <class Network, std::size_t Stages>
constexpr stage_cuts<Stages> partition(const stage_range_costs<Network::block_count>& measured)
{
    static_assert(is_network<Network>::value, "partition needs a network<input<C, H, W>, Block...>.");
    return detail::balanced_cuts_by<Stages, Network::block_count>(measured);
}

// The cost of each stage under cuts, priced by measured stage costs.
template <std::size_t Blocks, std::size_t Points>
constexpr std::array<std::size_t, Points - 1> stage_costs(const stage_range_costs<Blocks>& measured,
                                                          const std::array<std::size_t, Points>& cuts)
{
    std::array<std::size_t, Points - 1> totals{};
    for (std::size_t s = 0; s + 1 < Points; ++s) totals[s] = measured(cuts[s], cuts[s + 1], s + 2 == Points);
    return totals;
}

// Whether cuts (given by hand, or from partition) fit Network: from 0 to
// its block count, every stage non-empty.
template <class Network, std::size_t Points>
constexpr bool valid_cuts(const std::array<std::size_t, Points>& cuts)
{
    constexpr std::size_t Stages = Points - 1;
    if (Points < 2) return false;
    if (cuts[0] != 0 || cuts[Stages] != Network::block_count) return false;
    for (std::size_t s = 0; s < Stages; ++s) {
        if (cuts[s] >= cuts[s + 1]) return false;
    }
    return true;
}

// The cost of each stage under cuts, the last stage's blocks priced by
// last_stage_costs.
template <class Cost, std::size_t N, std::size_t Points>
constexpr std::array<Cost, Points - 1> stage_costs(const std::array<Cost, N>& costs,
                                                   const std::array<Cost, N>& last_stage_costs,
                                                   const std::array<std::size_t, Points>& cuts)
{
    constexpr std::size_t Stages = Points - 1;
    std::array<Cost, Stages> totals{};
    for (std::size_t s = 0; s < Stages; ++s) {
        const auto& priced = s + 1 == Stages ? last_stage_costs : costs;
        for (std::size_t i = cuts[s]; i < cuts[s + 1]; ++i) totals[s] += priced[i];
    }
    return totals;
}

// The same with every stage priced alike.
template <class Cost, std::size_t N, std::size_t Points>
constexpr std::array<Cost, Points - 1> stage_costs(const std::array<Cost, N>& costs,
                                                   const std::array<std::size_t, Points>& cuts)
{
    return stage_costs(costs, costs, cuts);
}

// Stages grouped again, at run time: `groups` contiguous non-empty groups of
// the stages whose costs are given (stage_costs), minimising the largest
// group's cost; among equally good groupings, the last group starts as
// late as possible, then the one before it. Returns groups + 1 stage indices, from 0 to costs.size(): group
// g holds stages [result[g], result[g + 1]). An MPI pipeline places each
// group on one rank. Raises invalid_argument (error.hpp) unless 1 <= groups <=
// costs.size().
//
//   balanced_groups(std::array<std::size_t, 4>{3, 1, 1, 3}, 2) == {0, 2, 4}
inline std::vector<std::size_t> balanced_groups(std::span<const std::size_t> costs, std::size_t groups)
{
    const std::size_t n = costs.size();
    if (groups < 1 || groups > n) {
        raise_error(error_kind::invalid_argument,
                    std::to_string(n) + " stages cannot be placed on " + std::to_string(groups) +
                        " ranks: every rank needs at least one stage (at most " + std::to_string(n) + " ranks).");
    }
    std::vector<std::size_t> prefix(n + 1, 0);
    for (std::size_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + costs[i];
    constexpr std::size_t unreachable = std::numeric_limits<std::size_t>::max();
    // worst[g][i]: the smallest largest cost of the first i stages in g + 1
    // groups; start[g][i]: where the last of those groups begins.
    std::vector<std::vector<std::size_t>> worst(groups, std::vector<std::size_t>(n + 1, unreachable));
    std::vector<std::vector<std::size_t>> start(groups, std::vector<std::size_t>(n + 1, 0));
    for (std::size_t i = 1; i <= n; ++i) worst[0][i] = prefix[i];
    for (std::size_t g = 1; g < groups; ++g) {
        for (std::size_t i = g + 1; i <= n; ++i) {
            for (std::size_t k = g; k < i; ++k) {
                if (worst[g - 1][k] == unreachable) continue;
                const std::size_t candidate = std::max(worst[g - 1][k], prefix[i] - prefix[k]);
                if (candidate <= worst[g][i]) {
                    worst[g][i] = candidate;
                    start[g][i] = k;
                }
            }
        }
    }
    std::vector<std::size_t> cuts(groups + 1, 0);
    cuts[groups] = n;
    for (std::size_t g = groups - 1; g > 0; --g) cuts[g] = start[g][cuts[g + 1]];
    return cuts;
}

} // namespace petra
