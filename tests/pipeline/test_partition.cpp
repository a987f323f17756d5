// The stage partitioner: valid cuts (every block in exactly one stage, no
// stage empty), optimal against brute force on small cost lists, the
// reference network's balanced cuts, cuts on measured stage costs, and the
// built-in cost model against stage ticks measured on the machines met.
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

// What every run of the reference network's blocks costs as a stage,
// measured with scripts/calibrate's command (microseconds per micro-batch of
// 64; bench/RESULTS.md, "Stage ticks and cuts"), the latest of each CPU and
// instruction set met, with how far above the best cuts of those ticks the
// model's may leave the slowest stage (per mille). Intel's and Zen 4's
// blocks were only ever timed one by one, which misleads (network.hpp,
// block_profile): they have no row until their stages are measured.
struct measured_stage_ticks {
    const char* machine;
    stage_range_costs<10> ticks;
    std::size_t permille_within;
};
constexpr std::array<measured_stage_ticks, 3> measured{{
    {"Zen 5, AVX-512, 2026-12-06",
     {.stage = {{
          {2416, 10466, 17774, 22021, 27364, 32599, 35701, 41167, 46197, 0},
          {0, 7970, 15854, 20041, 25661, 30760, 34355, 39588, 43887, 0},
          {0, 0, 7733, 12264, 18396, 23618, 27663, 31542, 35513, 0},
          {0, 0, 0, 5134, 10551, 15419, 19086, 24153, 28288, 0},
          {0, 0, 0, 0, 5422, 10805, 14589, 20059, 23595, 0},
          {0, 0, 0, 0, 0, 5191, 9163, 14359, 18734, 0},
          {0, 0, 0, 0, 0, 0, 3607, 9022, 13497, 0},
          {0, 0, 0, 0, 0, 0, 0, 4582, 9355, 0},
          {0, 0, 0, 0, 0, 0, 0, 0, 4593, 0},
          {0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
      }},
      .last_stage = {36798, 34797, 29514, 23751, 19449, 15106, 11255, 8074, 3901, 165}},
     1000},
    {"Zen 5 held to AVX2, 2026-12-06",
     {.stage = {{
          {3731, 13965, 23459, 31156, 39740, 47669, 53354, 60745, 68697, 0},
          {0, 9982, 21319, 28118, 35371, 44304, 49325, 58325, 65785, 0},
          {0, 0, 10542, 17437, 25633, 34375, 41320, 46833, 58706, 0},
          {0, 0, 0, 8025, 16597, 23760, 30789, 38184, 44632, 0},
          {0, 0, 0, 0, 7878, 16202, 22426, 30214, 36985, 0},
          {0, 0, 0, 0, 0, 7796, 14303, 21946, 29980, 0},
          {0, 0, 0, 0, 0, 0, 6580, 14339, 21751, 0},
          {0, 0, 0, 0, 0, 0, 0, 7287, 14594, 0},
          {0, 0, 0, 0, 0, 0, 0, 0, 7132, 0},
          {0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
      }},
      .last_stage = {53119, 52634, 44125, 35659, 29840, 24042, 17405, 11744, 5889, 153}},
     1000},
    {"Zen 5 held to SSE2, 2026-12-06",
     {.stage = {{
          {7009, 45235, 82654, 98960, 127322, 156467, 170607, 193825, 217584, 0},
          {0, 38556, 78602, 96311, 122978, 150226, 167118, 187470, 210926, 0},
          {0, 0, 38070, 55201, 83613, 111468, 127240, 151770, 179404, 0},
          {0, 0, 0, 17755, 46491, 74889, 93722, 113497, 136093, 0},
          {0, 0, 0, 0, 28465, 57640, 72324, 95092, 119034, 0},
          {0, 0, 0, 0, 0, 28762, 43955, 67701, 91110, 0},
          {0, 0, 0, 0, 0, 0, 15694, 39936, 62336, 0},
          {0, 0, 0, 0, 0, 0, 0, 23068, 47759, 0},
          {0, 0, 0, 0, 0, 0, 0, 0, 23626, 0},
          {0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
      }},
      .last_stage = {163658, 158082, 133505, 103150, 92568, 70004, 49105, 36864, 18436, 155}},
     1000},
}};

// The slowest stage of the model's cuts into Stages, priced by ticks,
// against that of the best cuts of ticks, in thousandths rounded up.
template <std::size_t Stages>
std::size_t model_slowest_stage_permille(const stage_range_costs<10>& ticks)
{
    using net = reference_network<>;
    const auto slowest = [&](const stage_cuts<Stages>& cuts) {
        const auto totals = stage_costs(ticks, cuts);
        return *std::max_element(totals.begin(), totals.end());
    };
    const std::size_t model = slowest(partition<net, Stages>()), best = slowest(partition<net, Stages>(ticks));
    return (model * 1000 + best - 1) / best;
}

} // namespace

// Measured stage costs: partition's cuts are the best of every possible
// cut, checked by trying them all.
TEST_CASE("partition: on measured stage costs, the cuts no other cuts beat")
{
    using net = reference_network<>;
    for (const measured_stage_ticks& ticks : measured) {
        const std::string machine = ticks.machine;
        CAPTURE(machine);
        const auto best = partition<net, 3>(ticks.ticks);
        CHECK(valid_cuts<net>(best));
        const auto totals = stage_costs(ticks.ticks, best);
        const std::size_t slowest = *std::max_element(totals.begin(), totals.end());
        for (std::size_t first = 1; first < 9; ++first) {
            for (std::size_t second = first + 1; second < 10; ++second) {
                const auto other = stage_costs(ticks.ticks, stage_cuts<3>{0, first, second, 10});
                CHECK(slowest <= *std::max_element(other.begin(), other.end()));
            }
        }
        // Two stages, by hand: the last stage's cost is last_stage[first].
        const auto two = partition<net, 2>(ticks.ticks);
        for (std::size_t cut = 1; cut < 10; ++cut) {
            CHECK(std::max(ticks.ticks.stage[0][two[1] - 1], ticks.ticks.last_stage[two[1]]) <=
                  std::max(ticks.ticks.stage[0][cut - 1], ticks.ticks.last_stage[cut]));
        }
    }
}

// The built-in cost model (block_profile) against what stages measured: its
// cuts of 2 to 6 stages leave the slowest stage within each measurement's
// bound of the best cuts of the measured ticks, on every build measured.
TEST_CASE("partition: the cost model cuts the reference network as measured stage ticks do")
{
    for (const measured_stage_ticks& ticks : measured) {
        const std::string machine = ticks.machine;
        CAPTURE(machine);
        CHECK(model_slowest_stage_permille<2>(ticks.ticks) <= ticks.permille_within);
        CHECK(model_slowest_stage_permille<3>(ticks.ticks) <= ticks.permille_within);
        CHECK(model_slowest_stage_permille<4>(ticks.ticks) <= ticks.permille_within);
        CHECK(model_slowest_stage_permille<5>(ticks.ticks) <= ticks.permille_within);
        CHECK(model_slowest_stage_permille<6>(ticks.ticks) <= ticks.permille_within);
    }
}
