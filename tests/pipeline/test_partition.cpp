// The stage partitioner: valid cuts (every block in exactly one stage, no
// stage empty), optimal against brute force on small cost lists, the
// reference network's balanced cuts, and the built-in cost model against
// block ticks measured on the machines met.
#include <algorithm>
#include <array>
#include <cstddef>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <petra/core.hpp>
#include <petra/partition.hpp>

using namespace petra;

namespace {

// The smallest largest-stage cost over every way to cut costs into stages
// contiguous non-empty stages, the last stage's blocks priced by last_costs,
// by enumerating them.
std::size_t brute_force_best(const std::vector<std::size_t>& costs, const std::vector<std::size_t>& last_costs,
                             std::size_t stages)
{
    const std::size_t n = costs.size();
    std::size_t best = ~std::size_t{0};
    // A subset of the n - 1 gaps between blocks, of size stages - 1.
    for (std::size_t mask = 0; mask < (std::size_t{1} << (n - 1)); ++mask) {
        if (std::size_t(__builtin_popcountll(mask)) != stages - 1) continue;
        std::size_t largest = 0, current = 0, stage = 0;
        for (std::size_t i = 0; i < n; ++i) {
            current += stage + 1 == stages ? last_costs[i] : costs[i];
            if (i + 1 == n || (mask >> i) & 1) {
                ++stage;
                largest = std::max(largest, current);
                current = 0;
            }
        }
        best = std::min(best, largest);
    }
    return best;
}

// With cheaper_last, the last stage's blocks cost a random part of their
// cost elsewhere (as PETRA's last stage, which reconstructs nothing).
template <std::size_t N, std::size_t Stages>
void check_against_brute_force(std::mt19937_64& generator, std::size_t largest_cost, bool cheaper_last = false)
{
    for (int trial = 0; trial < 30; ++trial) {
        std::array<std::size_t, N> costs{}, last_costs{};
        for (std::size_t i = 0; i < N; ++i) {
            costs[i] = uniform_int(generator, std::size_t{1}, largest_cost);
            last_costs[i] = cheaper_last ? uniform_int(generator, std::size_t{1}, costs[i]) : costs[i];
        }
        const auto cuts = balanced_cuts<Stages>(costs, last_costs);
        // Valid: from 0 to N, strictly increasing (every stage non-empty, so
        // every block in exactly one stage).
        REQUIRE(cuts[0] == 0);
        REQUIRE(cuts[Stages] == N);
        for (std::size_t s = 0; s < Stages; ++s) REQUIRE(cuts[s] < cuts[s + 1]);
        const auto totals = stage_costs(costs, last_costs, cuts);
        const std::size_t largest = *std::max_element(totals.begin(), totals.end());
        CAPTURE(N);
        CAPTURE(Stages);
        CHECK(largest == brute_force_best(std::vector<std::size_t>(costs.begin(), costs.end()),
                                          std::vector<std::size_t>(last_costs.begin(), last_costs.end()), Stages));
    }
}

} // namespace

TEST_CASE("partition: optimal against brute force on small cost lists")
{
    std::mt19937_64 generator(1);
    for (bool cheaper_last : {false, true}) {
        for (std::size_t largest_cost : {3, 100}) { // many ties, then few
            check_against_brute_force<1, 1>(generator, largest_cost, cheaper_last);
            check_against_brute_force<5, 1>(generator, largest_cost, cheaper_last);
            check_against_brute_force<5, 2>(generator, largest_cost, cheaper_last);
            check_against_brute_force<5, 5>(generator, largest_cost, cheaper_last);
            check_against_brute_force<8, 3>(generator, largest_cost, cheaper_last);
            check_against_brute_force<10, 4>(generator, largest_cost, cheaper_last);
            check_against_brute_force<12, 6>(generator, largest_cost, cheaper_last);
            check_against_brute_force<12, 11>(generator, largest_cost, cheaper_last);
        }
    }
}

TEST_CASE("partition: known cases")
{
    static_assert(balanced_cuts<2>(std::array<std::size_t, 4>{1, 1, 1, 1}) == stage_cuts<2>{0, 2, 4});
    static_assert(balanced_cuts<2>(std::array<std::size_t, 3>{10, 1, 1}) == stage_cuts<2>{0, 1, 3});
    static_assert(balanced_cuts<3>(std::array<std::size_t, 3>{5, 5, 5}) == stage_cuts<3>{0, 1, 2, 3});
    // One expensive block decides the bound; the rest is split around it.
    static_assert(balanced_cuts<3>(std::array<std::size_t, 6>{1, 1, 9, 1, 1, 1}) == stage_cuts<3>{0, 2, 3, 6});
}

TEST_CASE("partition: the reference network in 1 to 4 balanced stages, computed at compile time")
{
    using net = reference_network<>;
    constexpr auto costs = tick_costs<net>();
    constexpr auto last_costs = last_stage_tick_costs<net>();
    constexpr auto one = partition<net, 1>();
    constexpr auto two = partition<net, 2>();
    constexpr auto four = partition<net, 4>();
    static_assert(one == stage_cuts<1>{0, 10});
    static_assert(valid_cuts<net>(two) && valid_cuts<net>(four));
    static_assert(!valid_cuts<net>(stage_cuts<2>{0, 0, 10}) && !valid_cuts<net>(stage_cuts<2>{0, 5, 9}));
    // Four stages: no stage costs more than a third of the total (the
    // couplings at each resolution cost about the same, so a quarter is out
    // of reach with blocks this coarse).
    const auto totals = stage_costs(costs, last_costs, four);
    std::size_t total = 0;
    for (std::size_t cost : costs) total += cost;
    for (std::size_t s = 0; s < 4; ++s) {
        CAPTURE(s);
        CHECK(totals[s] * 3 <= total);
    }
    const std::vector<std::size_t> all(costs.begin(), costs.end()), last(last_costs.begin(), last_costs.end());
    const auto two_totals = stage_costs(costs, last_costs, two);
    CHECK(std::max(two_totals[0], two_totals[1]) == brute_force_best(all, last, 2));
    CHECK(*std::max_element(totals.begin(), totals.end()) == brute_force_best(all, last, 4));
}

// default_cuts: the reference network's calibrated (or modelled) cuts, any
// other network's from the cost model; valid for every J up to the blocks.
TEST_CASE("partition: default_cuts is reference_cuts for the reference network, partition for another")
{
    using reference = reference_network<>;
    using reversible = reversible_reference_network<>;
    static_assert(default_cuts<reference, 2>() == reference_cuts<2>());
    static_assert(default_cuts<reference, 4>() == reference_cuts<4>());
    static_assert(default_cuts<reversible, 3>() == partition<reversible, 3>());
    static_assert(valid_cuts<reference>(default_cuts<reference, 10>()));
    static_assert(valid_cuts<reversible>(default_cuts<reversible, 10>()));
    CHECK(default_cuts<reference, 1>() == stage_cuts<1>{0, 10});
}

// Stages grouped again onto ranks (balanced_groups): against every grouping
// of small cost lists, and refusals of impossible rank counts.
TEST_CASE("partition: stages grouped onto ranks minimise the largest group, contiguous and non-empty")
{
    std::mt19937_64 generator(5);
    for (std::size_t stages = 1; stages <= 6; ++stages) {
        for (std::size_t groups = 1; groups <= stages; ++groups) {
            std::vector<std::size_t> costs(stages);
            for (std::size_t& value : costs) value = uniform_int(generator, std::size_t{1}, std::size_t{20});
            const std::vector<std::size_t> cuts = balanced_groups(costs, groups);
            REQUIRE(cuts.size() == groups + 1);
            CHECK(cuts.front() == 0);
            CHECK(cuts.back() == stages);
            std::size_t largest = 0;
            for (std::size_t g = 0; g < groups; ++g) {
                CHECK(cuts[g] < cuts[g + 1]);
                std::size_t sum = 0;
                for (std::size_t s = cuts[g]; s < cuts[g + 1]; ++s) sum += costs[s];
                largest = std::max(largest, sum);
            }
            CHECK(largest == brute_force_best(costs, costs, groups));
        }
    }
    CHECK(balanced_groups(std::vector<std::size_t>{3, 1, 1, 3}, 2) == std::vector<std::size_t>{0, 2, 4});
    CHECK_THROWS_WITH_AS(balanced_groups(std::vector<std::size_t>{1, 1}, 3),
                         "2 stages cannot be placed on 3 ranks: every rank needs at least one stage (at most 2 ranks).",
                         std::invalid_argument);
    CHECK_THROWS_AS(balanced_groups(std::vector<std::size_t>{1, 1}, 0), std::invalid_argument);
}

TEST_CASE("partition: the cost model prices the couplings' Winograd-form convolutions below their FLOPs")
{
    using net = reference_network<>;
    // Only the couplings' 3x3 stride-1 convolutions between 16 or more
    // channels take Winograd's form: not the stem (one input channel), the
    // downsamplings (stride 2, 1x1) or the head.
    for (std::size_t i = 0; i < net::block_count; ++i) {
        CAPTURE(i);
        const block_profile& block = net::profile[i];
        CHECK((block.winograd_forward_flops > 0) == block.reversible);
        CHECK(block.winograd_forward_flops <= block.forward_flops);
        const std::size_t traffic = block_profile::flops_per_traffic_value * block.traffic_values();
        if (block.reversible) {
            CHECK(block.tick_cost() < block.tick_flops() + traffic);
        } else {
            CHECK(block.tick_cost() == block.tick_flops() + traffic);
        }
    }
}

namespace {

// Block ticks of the reference network measured with scripts/calibrate's
// command (microseconds per micro-batch of 64; bench/RESULTS.md, "Stage
// ticks and cuts"), the latest of each CPU and instruction set met, with how
// far above the best cuts of those ticks the model's may leave the slowest
// stage (per mille): 2% where the model was fitted, what it reached on the
// others (Intel's two measurements differ by more than that between its
// 28x28 blocks; Zen 4's predate most of the kernels).
struct measured_ticks {
    const char* machine;
    std::size_t vector_floats; // of the build measured: 16 with AVX-512, 8 with AVX2, 4 with SSE2
    block_costs<10> costs;
    std::size_t permille_within;
};
constexpr std::array<measured_ticks, 5> measured{{
    {"Zen 5, AVX-512, 2026-12-06",
     16,
     {.tick = {2586, 7738, 7962, 4533, 4929, 5214, 3114, 4259, 4594, 162},
      .last_stage_tick = {1893, 6057, 6155, 3443, 3816, 4213, 2254, 3299, 3414, 104}},
     1020},
    {"Intel Xeon model 167, AVX-512, 2026-12-03",
     16,
     {.tick = {5620, 14800, 16420, 8640, 9800, 10100, 7060, 7460, 7590, 470},
      .last_stage_tick = {3860, 11340, 11540, 6260, 7510, 7650, 5230, 6120, 5850, 330}},
     1070},
    {"Zen 4, AVX-512, 2026-12-01",
     16,
     {.tick = {7700, 23000, 25300, 14900, 17200, 16500, 11300, 12000, 11300, 300},
      .last_stage_tick = {5200, 18400, 18000, 11000, 12500, 12200, 7700, 9000, 10300, 200}},
     1110},
    {"Zen 5 held to AVX2, 2026-12-06",
     8,
     {.tick = {3048, 9522, 9192, 6497, 7475, 7499, 5903, 7156, 7190, 148},
      .last_stage_tick = {2151, 7425, 6881, 4943, 5717, 5514, 4453, 5630, 5536, 95}},
     1020},
    {"Zen 5 held to SSE2, 2026-12-06",
     4,
     {.tick = {6635, 37039, 37411, 16393, 27809, 28312, 14568, 23779, 23405, 171},
      .last_stage_tick = {4302, 27252, 28154, 12025, 20683, 20462, 11102, 18321, 18150, 112}},
     1020},
}};

// The slowest stage of the model's cuts into Stages, priced by ticks,
// against that of the best cuts of ticks, in thousandths rounded up.
template <std::size_t Stages>
std::size_t model_slowest_stage_permille(const block_costs<10>& ticks)
{
    using net = reference_network<>;
    const auto slowest = [&](const stage_cuts<Stages>& cuts) {
        const auto totals = stage_costs(ticks.tick, ticks.last_stage_tick, cuts);
        return *std::max_element(totals.begin(), totals.end());
    };
    const std::size_t model = slowest(partition<net, Stages>()), best = slowest(partition<net, Stages>(ticks));
    return (model * 1000 + best - 1) / best;
}

} // namespace

// The built-in cost model (block_profile: its constants for this build's
// vector width) against what the blocks measured: its cuts of 2 to 6 stages
// leave the slowest stage within each measurement's bound of the best cuts of
// the measured ticks, on every build measured whose vector width the model
// prices as this build's (traffic_price).
TEST_CASE("partition: the cost model cuts the reference network as ticks measured with its vector width do")
{
    std::size_t checked = 0;
    for (const measured_ticks& ticks : measured) {
        if (traffic_price(ticks.vector_floats) != block_profile::flops_per_traffic_value) continue;
        ++checked;
        const std::string machine = ticks.machine;
        CAPTURE(machine);
        CHECK(model_slowest_stage_permille<2>(ticks.costs) <= ticks.permille_within);
        CHECK(model_slowest_stage_permille<3>(ticks.costs) <= ticks.permille_within);
        CHECK(model_slowest_stage_permille<4>(ticks.costs) <= ticks.permille_within);
        CHECK(model_slowest_stage_permille<5>(ticks.costs) <= ticks.permille_within);
        CHECK(model_slowest_stage_permille<6>(ticks.costs) <= ticks.permille_within);
    }
    CHECK(checked >= 2);
}
