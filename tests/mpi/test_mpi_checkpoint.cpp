// Checkpoints of a pipeline on MPI ranks, one shard per stage and a
// manifest written last: a run saved mid-epoch on the ranks and resumed on
// the ranks, on the simulator, or saved on threads and resumed on the
// ranks, ends with the parameters, running statistics and epoch statistics
// of a run never stopped, bit for bit; a manifest that is missing, or names
// a shard that is missing, truncated or of another save, is refused on
// every rank with the shard named; a save interrupted before its manifest
// leaves the previous checkpoint loadable.
#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <mpi.h>

#include <petra/mpi.hpp>
#include <petra/petra.hpp>

#include "mpi/mpi_support.hpp"
#include "pipeline/pipeline_support.hpp"

using namespace petra;
using test::feed_range;
using test::pipeline_network;
using test::plain_sgd;

namespace {

using petra::test::shared_directory;
using petra::test::world_rank;

// Stages, a rank each (not named J: the other sources built into test_mpi's
// one unit take J as a template parameter, which would hide it).
constexpr std::size_t stage_count = 3;
using pipeline_on_ranks = test::ranks_pipeline<stage_count>;
using simulator = test::simulator<stage_count>;
using threads = test::threads<stage_count>;
constexpr std::size_t micro_batches_per_epoch = 13;
constexpr std::uint64_t signature = pipeline_network::signature;

double decaying_rate(std::size_t step) { return 0.03 / (1.0 + 0.05 * double(step)); }

struct run_result {
    network_parameters<pipeline_network, float> parameters{0}; // on rank 0 for the ranks' runs
    std::vector<epoch_statistics> epochs;
};

// The rest of epoch 2 from micro-batch `at`, then epoch 3.
template <class Pipeline>
void finish_run(Pipeline& pipeline, const test::micro_batches& data, std::size_t at, run_result& result)
{
    feed_range(pipeline, data, at, micro_batches_per_epoch);
    result.epochs.push_back(pipeline.drain());
    feed_range(pipeline, data, 0, micro_batches_per_epoch);
    result.epochs.push_back(pipeline.drain());
}

run_result uninterrupted(const test::micro_batches& data, const pipeline_options& options)
{
    run_result result;
    result.parameters = pipeline_network::make_parameters<float>(7);
    simulator pipeline(result.parameters, plain_sgd, decaying_rate, options);
    for (int e = 0; e < 3; ++e) {
        feed_range(pipeline, data, 0, micro_batches_per_epoch);
        result.epochs.push_back(pipeline.drain());
    }
    return result;
}

// The caller's own records in the manifest: a text, read back and checked.
struct job_records {
    std::string text = "saved at micro-batch";
    template <class Archive>
    void operator()(Archive& archive)
    {
        archive.section("test records");
        archive.text(text);
    }
};

void check_same(const run_result& expected, const run_result& actual, std::size_t first_epoch, bool parameters)
{
    REQUIRE(actual.epochs.size() + first_epoch == expected.epochs.size());
    for (std::size_t e = 0; e < actual.epochs.size(); ++e) {
        CAPTURE(e);
        CHECK(actual.epochs[e].micro_batches == expected.epochs[first_epoch + e].micro_batches);
        CHECK(actual.epochs[e].correct == expected.epochs[first_epoch + e].correct);
        CHECK(actual.epochs[e].loss_sum == expected.epochs[first_epoch + e].loss_sum);
    }
    if (!parameters) return;
    CHECK(std::ranges::equal(expected.parameters.values(), actual.parameters.values()));
    CHECK(std::ranges::equal(expected.parameters.state(), actual.parameters.state()));
}

void gather(pipeline_on_ranks& pipeline, run_result& result)
{
    pipeline.gather_parameters(world_rank() == 0 ? &result.parameters : nullptr);
}

// On the ranks: epoch 1, then micro-batches [0, at) of epoch 2, saved, and
// (the saved run) on to the end.
run_result saved_on_ranks(const test::micro_batches& data, const pipeline_options& options, std::size_t at,
                          const std::string& path)
{
    run_result result;
    pipeline_on_ranks pipeline(MPI_COMM_WORLD, 7, plain_sgd, decaying_rate, options);
    feed_range(pipeline, data, 0, micro_batches_per_epoch);
    result.epochs.push_back(pipeline.drain());
    feed_range(pipeline, data, 0, at);
    const std::uint64_t bytes = save_mpi_checkpoint(path, signature, pipeline, job_records{});
    CHECK(bytes > 0);
    finish_run(pipeline, data, at, result);
    gather(pipeline, result);
    return result;
}

run_result resumed_on_ranks(const test::micro_batches& data, const pipeline_options& options, std::size_t at,
                            const std::string& path)
{
    run_result result;
    pipeline_on_ranks pipeline(MPI_COMM_WORLD, 99, plain_sgd, decaying_rate, options);
    job_records records{.text = ""};
    load_mpi_checkpoint(path, signature, pipeline, records);
    CHECK(records.text == "saved at micro-batch");
    finish_run(pipeline, data, at, result);
    gather(pipeline, result);
    return result;
}

// In one process (rank 0): saved on threads, or resumed on the simulator.
run_result saved_on_threads(const test::micro_batches& data, const pipeline_options& options, std::size_t at,
                            const std::string& path)
{
    run_result result;
    result.parameters = pipeline_network::make_parameters<float>(7);
    threads pipeline(result.parameters, plain_sgd, decaying_rate, options);
    feed_range(pipeline, data, 0, micro_batches_per_epoch);
    result.epochs.push_back(pipeline.drain());
    feed_range(pipeline, data, 0, at);
    save_sharded_checkpoint(path, signature, pipeline, job_records{});
    finish_run(pipeline, data, at, result);
    return result;
}
run_result resumed_on_simulator(const test::micro_batches& data, const pipeline_options& options, std::size_t at,
                                const std::string& path)
{
    run_result result;
    result.parameters = pipeline_network::make_parameters<float>(99);
    simulator pipeline(result.parameters, plain_sgd, decaying_rate, options);
    job_records records{.text = ""};
    load_sharded_checkpoint(path, signature, pipeline, records);
    CHECK(records.text == "saved at micro-batch");
    finish_run(pipeline, data, at, result);
    return result;
}

// The message of the checkpoint_error a load throws on this rank.
std::string load_error(const std::string& path, const pipeline_options& options)
{
    pipeline_on_ranks pipeline(MPI_COMM_WORLD, 99, plain_sgd, decaying_rate, options);
    job_records records;
    try {
        load_mpi_checkpoint(path, signature, pipeline, records);
    } catch (const checkpoint_error& error) {
        return error.what();
    }
    return "";
}

} // namespace

TEST_CASE("mpi checkpoints: saved on the ranks, resumed on the ranks or the simulator; saved on threads, resumed "
          "on the ranks")
{
    const shared_directory directory("petra_mpi_checkpoint_");
    const test::micro_batches data(micro_batches_per_epoch, 4, 21);
    for (const pipeline_options& options :
         {pipeline_options{.batch = 4}, pipeline_options{.batch = 4, .accumulation = 2, .input_buffer = true},
          pipeline_options{.batch = 4, .accumulation = 2, .parameter_buffer = true},
          pipeline_options{.batch = 4, .input_buffer = true, .parameter_buffer = true}}) {
        for (std::size_t at : {0, 2, 5}) {
            CAPTURE(options.accumulation);
            CAPTURE(options.input_buffer);
            CAPTURE(options.parameter_buffer);
            CAPTURE(at);
            const run_result reference = uninterrupted(data, options);
            const std::string path = directory.file("ranks.checkpoint");
            check_same(reference, saved_on_ranks(data, options, at, path), 0, world_rank() == 0);
            check_same(reference, resumed_on_ranks(data, options, at, path), 1, world_rank() == 0);
            if (world_rank() == 0) check_same(reference, resumed_on_simulator(data, options, at, path), 1, true);

            const std::string threads_path = directory.file("threads.checkpoint");
            if (world_rank() == 0) check_same(reference, saved_on_threads(data, options, at, threads_path), 0, true);
            MPI_Barrier(MPI_COMM_WORLD);
            check_same(reference, resumed_on_ranks(data, options, at, threads_path), 1, world_rank() == 0);
        }
    }
}

TEST_CASE("mpi checkpoints: a missing manifest, or a shard missing, truncated or of another save, is refused on every "
          "rank, naming the shard")
{
    const shared_directory directory("petra_mpi_checkpoint_");
    const test::micro_batches data(micro_batches_per_epoch, 4, 21);
    const pipeline_options options{.batch = 4};
    const std::string path = directory.file("run.checkpoint"), other = directory.file("other.checkpoint");
    {
        pipeline_on_ranks pipeline(MPI_COMM_WORLD, 7, plain_sgd, decaying_rate, options);
        feed_range(pipeline, data, 0, 4);
        save_mpi_checkpoint(path, signature, pipeline, job_records{});
        save_mpi_checkpoint(other, signature, pipeline, job_records{});
    }
    const auto shard_of = [&](const std::string& manifest, std::size_t stage) {
        for (const auto& entry : std::filesystem::directory_iterator(directory.path)) {
            const std::string name = entry.path().filename().string();
            const std::string prefix = std::filesystem::path(manifest).filename().string() + ".";
            if (name.starts_with(prefix) && name.ends_with(".stage" + std::to_string(stage))) return entry.path();
        }
        return std::filesystem::path();
    };
    // The ranks that host the damaged stage name its shard; the others say
    // another rank failed.
    const auto check_refused = [&](std::size_t stage, const std::string& what) {
        const std::string message = load_error(path, options);
        pipeline_on_ranks placement(MPI_COMM_WORLD, 1, plain_sgd, decaying_rate, options);
        CAPTURE(message);
        CAPTURE(world_rank());
        CAPTURE(placement.first_stage());
        CAPTURE(placement.end_stage());
        if (placement.hosts(stage)) {
            CHECK(message.find("the shard of stage " + std::to_string(stage)) != std::string::npos);
            CHECK(message.find(what) != std::string::npos);
        } else {
            CHECK(message.find("another rank failed") != std::string::npos);
        }
    };

    CHECK(load_error(directory.file("none.checkpoint"), options).find("cannot be opened") != std::string::npos);

    const std::filesystem::path last = shard_of(path, stage_count - 1), moved = last.string() + ".moved";
    if (world_rank() == 0) std::filesystem::rename(last, moved);
    MPI_Barrier(MPI_COMM_WORLD);
    check_refused(stage_count - 1, "is missing");

    if (world_rank() == 0) {
        std::filesystem::copy_file(moved, last);
        std::filesystem::resize_file(last, std::filesystem::file_size(last) - 10);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    check_refused(stage_count - 1, "(truncated)");
    if (world_rank() == 0) std::filesystem::rename(moved, last); // whole again

    const std::filesystem::path first = shard_of(path, 0);
    if (world_rank() == 0)
        std::filesystem::copy_file(shard_of(other, 0), first, std::filesystem::copy_options::overwrite_existing);
    MPI_Barrier(MPI_COMM_WORLD);
    check_refused(0, "belongs to another save");
}

TEST_CASE("mpi checkpoints: a save interrupted before its manifest leaves the previous checkpoint loadable")
{
    const shared_directory directory("petra_mpi_checkpoint_");
    const test::micro_batches data(micro_batches_per_epoch, 4, 21);
    const pipeline_options options{.batch = 4, .accumulation = 2};
    const std::size_t at = 4;
    const std::string path = directory.file("run.checkpoint");
    const run_result reference = uninterrupted(data, options);
    {
        pipeline_on_ranks pipeline(MPI_COMM_WORLD, 7, plain_sgd, decaying_rate, options);
        feed_range(pipeline, data, 0, micro_batches_per_epoch);
        pipeline.drain();
        feed_range(pipeline, data, 0, at);
        save_mpi_checkpoint(path, signature, pipeline, job_records{});
        feed_range(pipeline, data, at, at + 3);
        // The next save: every shard written, then the job dies before the
        // manifest (here: the manifest is never written).
        const std::vector<std::uint64_t> counts = pipeline.channel_counts();
        for (std::size_t j = pipeline.first_stage(); j < pipeline.end_stage(); ++j) {
            write_checkpoint_shard(path, signature, 12345, j,
                                   [&](checkpoint_writer& out) { pipeline.transfer_stage_state(j, out, counts); });
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }
    check_same(reference, resumed_on_ranks(data, options, at, path), 1, world_rank() == 0);
}
