// What scripts/plan needs of a network, in one Google Benchmark report:
// every block's forward, tick and last-stage tick (petra/benchmark.hpp) and,
// in the report's context, what is known at compile time: each block's kind
// and shapes, parameter count and input values per example (a message
// across a cut after block i - 1 carries batch x input_values of block i)
// and what a stage's memory needs of it, as JSON under "petra_plan_profile";
// for the reference network also memory_plan's own bytes per stage
// ("petra_plan_memory_J"), which scripts/plan --check-memory holds its
// mirror against.
//
// Built twice (bench/CMakeLists.txt):
//   bench_plan_reference  reference_network<>, and the stages of the cuts
//                         the pipelines use for J = 2 and 4 (validation);
//   bench_plan_wide       reference_network<64, 8>; the context also holds
//                         the profile of reference_network<64, 11> (37
//                         blocks, enough for 32 stages), whose blocks are
//                         <64, 8>'s kinds at the same shapes, so that
//                         scripts/plan times them by kind and shapes.
// Blocks of one kind and shapes cost the same; to measure each once:
//   bench_plan_wide --benchmark_filter='^block:(0|1|9|10|18|19|27)/'
#include <cstddef>
#include <cstdint>
#include <string>

#include <benchmark/benchmark.h>

#include <petra/benchmark.hpp>
#include <petra/memory_plan.hpp>
#include <petra/petra.hpp>

#include "benchmark_main.hpp"

namespace {

constexpr std::size_t batch = 64;

// {"blocks": [{"label": ..., "parameters": ..., "input_values": ...}, ...]},
// labels as register_block_benchmarks writes them.
template <class Network>
std::string profile_json()
{
    std::string text = "{\"blocks\": [";
    Network::for_each_block([&](auto index) {
        constexpr std::size_t I = decltype(index)::value;
        using bound = typename Network::template block<I>;
        const petra::block_profile& profile = Network::profile[I];
        if (I > 0) text += ", ";
        text += "{\"label\": \"" + std::string(bound::reversible ? "reversible " : "kept input ") +
                petra::detail::shape_text<typename bound::input>() + " -> " +
                petra::detail::shape_text<typename bound::output>() + "\"";
        text += ", \"parameters\": " + std::to_string(profile.parameter_count);
        text += ", \"input_values\": " + std::to_string(profile.input_values);
        text += ", \"output_values\": " + std::to_string(profile.output_values);
        // What a stage's memory needs of the block (scripts/plan mirrors
        // memory_plan from these): running statistics, workspace at the
        // batch, whether the block is reversible (a stage keeps the input of
        // any other), may skip its input gradient as block 0, passes a half
        // through (boundary_layout.hpp) and may write its output when
        // recomputed (a stage lends a buffer only then), and its per-thread scratch buffers,
        // forward and backward, by key.
        text += ", \"state\": " + std::to_string(profile.state_count);
        text += ", \"workspace_values\": " + std::to_string(Network::workspace_size(I, batch));
        text += std::string(", \"reversible\": ") + (bound::reversible ? "true" : "false");
        text += std::string(", \"input_gradient_optional\": ") +
                (petra::input_gradient_optional<bound>() ? "true" : "false");
        text +=
            std::string(", \"passes_first_half_through\": ") + (profile.passes_first_half_through ? "true" : "false");
        text += std::string(", \"recomputation_writes_output\": ") +
                (profile.recomputation_writes_output ? "true" : "false");
        petra::kernels::scratch_demand scratch = petra::forward_scratch_of<bound, float>(batch);
        scratch.merge(petra::backward_scratch_of<bound, float>(batch, true));
        if (I == 0 && petra::input_gradient_optional<bound>()) {
            scratch = petra::forward_scratch_of<bound, float>(batch);
            scratch.merge(petra::backward_scratch_of<bound, float>(batch, false));
        }
        std::string buffers;
        scratch.for_each_buffer([&](std::uint64_t key, std::size_t bytes) {
            if (!buffers.empty()) buffers += ", ";
            buffers += "[\"" + std::to_string(key) + "\", " + std::to_string(bytes) + "]";
        });
        text += ", \"scratch\": [" + buffers + "]}";
    });
    return text + "]}";
}

template <auto Cuts>
std::string cuts_text()
{
    std::string text;
    // Appended piece by piece: g++ 12 reports a false -Wrestrict on
    // `"," + std::to_string(cut)` when this is inlined into main.
    for (std::size_t cut : Cuts) {
        if (!text.empty()) text += ',';
        text += std::to_string(cut);
    }
    return text;
}

// memory_plan's bytes per stage for the reference cuts of J stages with
// replicas 1 and 2, as JSON: {"1": [...], "2": [...]}, for scripts/plan
// --check-memory to hold its mirror against.
template <class Network, std::size_t J>
std::string memory_plan_json()
{
    std::string text = "{";
    for (std::size_t replicas : {1, 2}) {
        const auto plan =
            petra::memory_plan<Network, petra::reference_cuts<J>()>({.batch = batch, .replicas = replicas});
        text += (replicas == 1 ? "\"" : ", \"") + std::to_string(replicas) + "\": {\"stages\": [";
        for (std::size_t j = 0; j < J; ++j) text += (j == 0 ? "" : ", ") + std::to_string(plan.stage_bytes(j));
        text += "], \"shared\": " + std::to_string(plan.shared_bytes) + "}";
    }
    return text + "}";
}

} // namespace

int main(int argc, char** argv)
{
#if PETRA_PLAN_WIDE
    using net = petra::reference_network<64, 8>;
    using deeper = petra::reference_network<64, 11>;
    petra::register_block_benchmarks<net>(batch);
    return petra::bench::run(argc, argv,
                             {{"petra_plan_network", "reference_network<64, 8>"},
                              {"petra_plan_batch", std::to_string(batch)},
                              {"petra_plan_profile", profile_json<net>()},
                              {"petra_plan_network_2", "reference_network<64, 11>"},
                              {"petra_plan_profile_2", profile_json<deeper>()}});
#else
    using net = petra::reference_network<>;
    petra::register_block_benchmarks<net>(batch);
    petra::register_stage_benchmarks<net, petra::reference_cuts<2>()>(batch);
    petra::register_stage_benchmarks<net, petra::reference_cuts<4>()>(batch);
    return petra::bench::run(argc, argv,
                             {{"petra_plan_network", "reference_network<>"},
                              {"petra_plan_batch", std::to_string(batch)},
                              {"petra_plan_profile", profile_json<net>()},
                              {"petra_plan_cuts_2", cuts_text<petra::reference_cuts<2>()>()},
                              {"petra_plan_cuts_4", cuts_text<petra::reference_cuts<4>()>()},
                              {"petra_plan_memory_2", memory_plan_json<net, 2>()},
                              {"petra_plan_memory_4", memory_plan_json<net, 4>()}});
#endif
}
