// mpi_pipeline::pause(): a run paused after several micro-batches, its
// stages read through the guard, then resumed, ends bit for bit where an
// uninterrupted run ends; the guard gives each hosted stage's parameters,
// running statistics and gradient sum as the simulator's guard gives them at
// the same point (nothing for the stages of other ranks); feed() and
// drain() under a guard are refused and change nothing. For every J this
// launch's rank count can host among 2, 3, 4, and k = 1, 2.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <vector>

#include <doctest/doctest.h>
#include <mpi.h>

#include <petra/mpi.hpp>
#include <petra/petra.hpp>

#include "pipeline/pipeline_support.hpp"

using namespace petra;
using test::pipeline_network;
using test::ranks_pipeline;

namespace {

bool same(std::span<const float> a, std::span<const float> b) { return std::ranges::equal(a, b); }

// What a guard shows of every stage at one point of the run.
struct stage_copies {
    std::vector<std::vector<float>> parameters, state, gradient_sums;
};

template <class Guard>
stage_copies copy_stages(const Guard& paused, std::size_t stage_count)
{
    stage_copies copies;
    for (std::size_t j = 0; j < stage_count; ++j) {
        copies.parameters.emplace_back(paused.stage_parameters(j).begin(), paused.stage_parameters(j).end());
        copies.state.emplace_back(paused.stage_state(j).begin(), paused.stage_state(j).end());
        copies.gradient_sums.emplace_back(paused.gradient_sum(j).begin(), paused.gradient_sum(j).end());
    }
    return copies;
}

bool paused_here(std::size_t micro_batch) { return micro_batch % 4 == 1; }

// Trains 2 epochs on the ranks, pausing after the micro-batches
// paused_here() names when `pause` is set (checking each guard against the
// simulator's copies); returns the epochs' statistics and, on rank 0, the
// parameters gathered.
template <std::size_t J>
std::vector<epoch_statistics> train_on_ranks(const test::micro_batches& data, const pipeline_options& options,
                                             const std::vector<stage_copies>* simulated,
                                             network_parameters<pipeline_network, float>& gathered)
{
    std::vector<epoch_statistics> epochs;
    ranks_pipeline<J> pipeline(MPI_COMM_WORLD, 3, test::plain_sgd, test::constant_rate, options);
    std::size_t pause_index = 0;
    for (std::size_t epoch = 0; epoch < 2; ++epoch) {
        for (std::size_t m = 0; m < data.images.size(); ++m) {
            if (pipeline.feeds()) pipeline.feed(data.images[m], data.labels[m]);
            else pipeline.feed();
            if (simulated == nullptr || !paused_here(m)) continue;
            const auto paused = pipeline.pause();
            const stage_copies& expected = (*simulated)[pause_index++];
            for (std::size_t j = 0; j < J; ++j) {
                CAPTURE(j);
                CAPTURE(m);
                if (!pipeline.hosts(j)) {
                    CHECK(paused.stage_parameters(j).empty());
                    CHECK(paused.gradient_sum(j).empty());
                    continue;
                }
                CHECK(same(paused.stage_parameters(j), expected.parameters[j]));
                CHECK(same(paused.stage_state(j), expected.state[j]));
                CHECK(same(paused.gradient_sum(j), expected.gradient_sums[j]));
            }
            CHECK_THROWS_WITH_AS(pipeline.feed(), doctest::Contains("pipeline: feed() while the pipeline is paused"),
                                 std::logic_error);
            CHECK_THROWS_WITH_AS(pipeline.drain(), doctest::Contains("pipeline: drain() while the pipeline is paused"),
                                 std::logic_error);
        }
        epochs.push_back(pipeline.drain());
    }
    pipeline.gather_parameters(pipeline.feeds() ? &gathered : nullptr);
    return epochs;
}

// The ranks of this launch: J stages need J of them at most.
std::size_t launched_ranks()
{
    int ranks = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    return std::size_t(ranks);
}

template <std::size_t J>
void check_paused_run(const pipeline_options& options)
{
    CAPTURE(J);
    CAPTURE(options.accumulation);
    const test::micro_batches data(14, options.batch, 40 + J);
    // The simulator's guards at the same points.
    std::vector<stage_copies> simulated;
    {
        auto parameters = pipeline_network::make_parameters<float>(3);
        test::simulator<J> pipeline(parameters, test::plain_sgd, test::constant_rate, options);
        for (std::size_t epoch = 0; epoch < 2; ++epoch) {
            for (std::size_t m = 0; m < data.images.size(); ++m) {
                pipeline.feed(data.images[m], data.labels[m]);
                if (paused_here(m)) simulated.push_back(copy_stages(pipeline.pause(), J));
            }
            pipeline.drain();
        }
    }
    auto paused_parameters = pipeline_network::make_parameters<float>(0);
    auto uninterrupted_parameters = pipeline_network::make_parameters<float>(0);
    const auto paused_epochs = train_on_ranks<J>(data, options, &simulated, paused_parameters);
    const auto uninterrupted_epochs = train_on_ranks<J>(data, options, nullptr, uninterrupted_parameters);
    for (std::size_t e = 0; e < 2; ++e) {
        CHECK(paused_epochs[e].micro_batches == data.images.size());
        CHECK(paused_epochs[e].loss_sum == uninterrupted_epochs[e].loss_sum);
        CHECK(paused_epochs[e].correct == uninterrupted_epochs[e].correct);
    }
    CHECK(same(paused_parameters.values(), uninterrupted_parameters.values()));
    CHECK(same(paused_parameters.state(), uninterrupted_parameters.state()));
}

} // namespace

TEST_CASE("mpi pipeline: a run paused and resumed ends bit for bit where an uninterrupted one does")
{
    for (std::size_t accumulation : {1, 2}) {
        const pipeline_options options{.batch = 4, .accumulation = accumulation};
        if (launched_ranks() <= 2) check_paused_run<2>(options);
        if (launched_ranks() <= 3) check_paused_run<3>(options);
        check_paused_run<4>(options); // launched on 2 or 3 ranks
    }
}
