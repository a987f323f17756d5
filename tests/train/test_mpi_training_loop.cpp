// The training loop with PETRA on MPI ranks (run on 2 ranks): a run
// stopped twice and resumed, on ranks, ends with the parameters of a run
// never stopped on the simulator; a checkpoint saved on ranks resumes on
// the simulator, and one saved there on ranks; checkpoints on the clock are
// saved by every rank together. Two replicas on the 2 ranks (one each, its
// 3 stages on threads) end as the simulator with 2 replicas, also when
// stopped within an epoch: their checkpoints wait for the epoch's end.
#include <mpi.h>

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <petra/petra.hpp>
#include <petra/train/mpi_training.hpp>

#include "mpi/mpi_support.hpp"
#include "pipeline/pipeline_support.hpp"
#include "train/loop_support.hpp"

namespace {

using petra::test::shared_directory;
using petra::test::world_rank;

using net = petra::test::pipeline_network;
using image_shape = net::input;
constexpr auto cuts = petra::test::cuts_of<3>;
using on_ranks = petra::petra_on_ranks<net, cuts>;
using on_simulator = petra::petra_on_simulator<net, cuts>;

using examples = petra::test::loop_examples;
using petra::test::parameter_digest;

const petra::sgd_options optimizer = petra::test::loop_optimizer;
const petra::training_plan plan({.epochs = 3, .batches_per_epoch = 10, .accumulation = 2},
                                {.peak = 0.05,
                                 .warmup_epochs = 0.5,
                                 .shape = petra::learning_rate_schedule::decay::cosine});
constexpr std::uint64_t seed = 1;

struct run_end {
    bool finished = false;
    std::size_t steps = 0;
    std::uint64_t digest = 0; // on rank 0 for the ranks' runs
};

// On every rank: the stop request is the same on each (a count), so the
// ranks agree on it.
run_end run_on_ranks(const std::string& path, std::size_t stop_at, double every_seconds = 0)
{
    const examples data;
    petra::tensor_source<image_shape> source(data.images, data.labels, 4, 5);
    on_ranks method(MPI_COMM_WORLD, seed, optimizer, plan.schedule(), {.batch = 4, .accumulation = 2});
    std::size_t asked = 0;
    petra::training_loop loop(method, source, plan,
                              {.checkpoint_path = path,
                               .checkpoint_every = 4,
                               .checkpoint_every_seconds = every_seconds,
                               .stop_requested = [&] { return stop_at != 0 && asked++ == stop_at; }});
    run_end end{loop.run(), loop.position().steps, 0};
    auto whole = net::make_parameters<float>(0);
    method.pipeline().gather_parameters(world_rank() == 0 ? &whole : nullptr);
    end.digest = parameter_digest(whole);
    return end;
}

run_end run_on_simulator(const std::string& path, std::size_t stop_at)
{
    const examples data;
    petra::tensor_source<image_shape> source(data.images, data.labels, 4, 5);
    auto weights = net::make_parameters<float>(seed);
    on_simulator method(weights, optimizer, plan.schedule(), {.batch = 4, .accumulation = 2});
    std::size_t asked = 0;
    petra::training_loop loop(method, source, plan,
                              {.checkpoint_path = path, .checkpoint_every = 4, .stop_requested = [&] {
                                   return stop_at != 0 && asked++ == stop_at;
                               }});
    run_end end{loop.run(), loop.position().steps, 0};
    end.digest = parameter_digest(weights);
    return end;
}

} // namespace

TEST_CASE("training loop on ranks: stopped twice and resumed, it ends as a run never stopped" * doctest::timeout(120))
{
    const shared_directory directory("petra_mpi_loop_");
    const run_end whole = run_on_simulator("", 0);
    const run_end ranks_whole = run_on_ranks("", 0);
    CHECK(ranks_whole.finished);
    if (world_rank() == 0) CHECK(ranks_whole.digest == whole.digest);

    const std::string path = directory.file("ranks.checkpoint");
    const run_end first = run_on_ranks(path, 13);
    CHECK_FALSE(first.finished);
    CHECK(first.steps == 13);
    const run_end second = run_on_ranks(path, 9);
    CHECK_FALSE(second.finished);
    CHECK(second.steps == 22);
    const run_end last = run_on_ranks(path, 0);
    CHECK(last.finished);
    CHECK(last.steps == 30);
    if (world_rank() == 0) CHECK(last.digest == whole.digest);
}

TEST_CASE("training loop on ranks: a checkpoint saved on ranks resumes on the simulator, and back" *
          doctest::timeout(120))
{
    const shared_directory directory("petra_mpi_loop_");
    const run_end whole = run_on_simulator("", 0);
    const std::string path = directory.file("moved.checkpoint");
    CHECK_FALSE(run_on_ranks(path, 11).finished);
    // Rank 0 goes on alone on the simulator to another stop; then every rank.
    std::string moved = directory.file("simulator.checkpoint");
    if (world_rank() == 0) {
        for (const auto& entry : std::filesystem::directory_iterator(directory.path)) {
            const std::string name = entry.path().filename().string();
            if (name.starts_with("moved.checkpoint")) {
                std::filesystem::copy_file(entry.path(), directory.path / ("simulator" + name.substr(5)));
            }
        }
        const run_end part = run_on_simulator(moved, 6);
        CHECK_FALSE(part.finished);
        CHECK(part.steps == 17);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    const run_end last = run_on_ranks(moved, 0);
    CHECK(last.finished);
    if (world_rank() == 0) CHECK(last.digest == whole.digest);
}

TEST_CASE("training loop on ranks: checkpoints on the clock are saved by every rank together" * doctest::timeout(120))
{
    const shared_directory directory("petra_mpi_loop_");
    const run_end whole = run_on_simulator("", 0);
    // Every micro-batch is due on the clock: every rank saves at every one
    // (a rank alone would wait for the others forever).
    const run_end end = run_on_ranks(directory.file("clock.checkpoint"), 0, 1e-9);
    CHECK(end.finished);
    if (world_rank() == 0) CHECK(end.digest == whole.digest);
}

namespace {

// Two replicas, one rank each: global micro-batches of 2 x 4 examples, 5
// per epoch.
const petra::training_plan replicas_plan({.epochs = 3, .batches_per_epoch = 5},
                                         {.peak = 0.05,
                                          .warmup_epochs = 0.5,
                                          .shape = petra::learning_rate_schedule::decay::cosine});
constexpr petra::pipeline_options replicas_options{.batch = 4, .replicas = 2};

run_end run_replicas_on_ranks(const std::string& path, std::size_t stop_at)
{
    const examples data;
    petra::tensor_source<image_shape> source(data.images, data.labels, 8, 5);
    on_ranks method(MPI_COMM_WORLD, seed, optimizer, replicas_plan.schedule(), replicas_options);
    CHECK_FALSE(method.checkpoints_within_epoch());
    std::size_t asked = 0;
    petra::training_loop loop(method, source, replicas_plan,
                              {.checkpoint_path = path, .checkpoint_every = 2, .stop_requested = [&] {
                                   return stop_at != 0 && asked++ == stop_at;
                               }});
    run_end end{loop.run(), loop.position().steps, 0};
    auto whole = net::make_parameters<float>(0);
    method.pipeline().gather_parameters(method.pipeline().rank() == 0 ? &whole : nullptr);
    end.digest = parameter_digest(whole);
    return end;
}

} // namespace

TEST_CASE("training loop on ranks: two replicas stopped within an epoch resume from its start, as the simulator" *
          doctest::timeout(120))
{
    const shared_directory directory("petra_mpi_loop_");
    const examples data;
    petra::tensor_source<image_shape> source(data.images, data.labels, 8, 5);
    auto weights = net::make_parameters<float>(seed);
    on_simulator simulated(weights, optimizer, replicas_plan.schedule(), replicas_options);
    petra::training_loop(simulated, source, replicas_plan, {}).run();
    const std::uint64_t whole = parameter_digest(weights);

    const std::string path = directory.file("replicas.checkpoint");
    // Stopped at step 8, within the second epoch: the checkpoints due at
    // steps 2 and 4 were saved at the first epoch's end, step 5.
    const run_end first = run_replicas_on_ranks(path, 8);
    CHECK_FALSE(first.finished);
    CHECK(first.steps == 8);
    const run_end last = run_replicas_on_ranks(path, 0);
    CHECK(last.finished);
    CHECK(last.steps == 15);
    // Each replica's rank 0 gathered its replica: both as the simulator's.
    CHECK(last.digest == whole);
}
