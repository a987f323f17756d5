// Replicas of PETRA's pipeline on MPI ranks compute what the simulator with
// the same replicas computes, bit for bit: after 2 epochs of 11 global
// micro-batches, every replica's parameters and running statistics equal
// the simulator's, the replicas' digests are equal, and the epochs'
// statistics are those of all replicas, and an evaluation scores as
// predict() on the simulator's network, for (D, J) = (2, 1), (2, 2),
// (2, 3), (3, 2) with 1 to J ranks per replica (a rank hosting several
// stages runs them on threads). Checkpoints between epochs resume under
// the same replicas, bit for bit, and refuse another count. Launched on 6
// ranks; a case uses the first D x R of them.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <mpi.h>

#include <petra/memory_plan.hpp>
#include <petra/mpi.hpp>
#include <petra/petra.hpp>

#include "mpi/mpi_support.hpp"
#include "pipeline/pipeline_support.hpp"

using namespace petra;
using test::cuts_of;
using test::pipeline_network;
using test::plain_sgd;
using test::ranks_pipeline;
using test::world_rank;
using test::world_size;

namespace {

// The first `ranks` ranks of the world, or none for the others (who skip
// the case).
struct first_ranks {
    MPI_Comm communicator = MPI_COMM_NULL;
    explicit first_ranks(std::size_t ranks)
    {
        REQUIRE(std::size_t(world_size()) >= ranks);
        MPI_Comm_split(MPI_COMM_WORLD, std::size_t(world_rank()) < ranks ? 0 : MPI_UNDEFINED, world_rank(),
                       &communicator);
    }
    ~first_ranks()
    {
        if (communicator != MPI_COMM_NULL) MPI_Comm_free(&communicator);
    }
    first_ranks(const first_ranks&) = delete;
    first_ranks& operator=(const first_ranks&) = delete;
};

// FNV-1a over the bytes of the values, chained.
std::uint64_t digest_of(std::uint64_t hash, std::span<const float> values)
{
    for (float value : values) {
        unsigned char bytes[sizeof value];
        std::memcpy(bytes, &value, sizeof value);
        for (unsigned char byte : bytes) hash = (hash ^ byte) * 1099511628211ull;
    }
    return hash;
}
constexpr std::uint64_t digest_basis = 14695981039346656037ull;

// The digest of a whole network's parameters, folded stage by stage as
// mpi_pipeline::fold_stages folds them.
template <std::size_t J>
std::uint64_t digest_of_stages(const network_parameters<pipeline_network, float>& parameters)
{
    std::uint64_t hash = digest_basis;
    for (std::size_t j = 0; j < J; ++j) {
        const std::size_t values = pipeline_network::parameter_offsets[cuts_of<J>[j]];
        const std::size_t values_end = pipeline_network::parameter_offsets[cuts_of<J>[j + 1]];
        const std::size_t state = pipeline_network::state_offsets[cuts_of<J>[j]];
        const std::size_t state_end = pipeline_network::state_offsets[cuts_of<J>[j + 1]];
        hash = digest_of(hash, parameters.values().subspan(values, values_end - values));
        hash = digest_of(hash, parameters.state().subspan(state, state_end - state));
    }
    return hash;
}

template <class Pipeline>
void feed_epoch(Pipeline& pipeline, const test::micro_batches& data)
{
    for (std::size_t m = 0; m < data.images.size(); ++m) {
        if (pipeline.feeds()) pipeline.feed(data.images[m], data.labels[m]);
        else pipeline.feed();
    }
}

// What one replica's ranks end with, checked against the simulator's.
template <std::size_t J>
void check_replica_result(ranks_pipeline<J>& pipeline, MPI_Comm communicator,
                          const network_parameters<pipeline_network, float>& simulated)
{
    auto gathered = pipeline_network::make_parameters<float>(0);
    const bool root = pipeline.rank() == 0;
    pipeline.gather_parameters(root ? &gathered : nullptr);
    if (root) {
        CAPTURE(pipeline.replica());
        CHECK(std::ranges::equal(simulated.values(), gathered.values()));
        CHECK(std::ranges::equal(simulated.state(), gathered.state()));
    }
    // A digest per replica, each folded over its own ranks: all equal, and
    // equal to the simulator's.
    const std::uint64_t digest = pipeline.fold_stages(
        digest_basis, [](std::uint64_t hash, std::size_t, std::span<const float> values, std::span<const float> state) {
            return digest_of(digest_of(hash, values), state);
        });
    int ranks = 0;
    MPI_Comm_size(communicator, &ranks);
    std::vector<std::uint64_t> digests(std::size_t(ranks), 0);
    MPI_Allgather(&digest, 1, MPI_UINT64_T, digests.data(), 1, MPI_UINT64_T, communicator);
    CHECK(std::ranges::all_of(digests, [&](std::uint64_t other) { return other == digests.front(); }));
    CHECK(digest == digest_of_stages<J>(simulated));
}

template <std::size_t D, std::size_t J>
void check_replicas_equal_simulation(std::size_t ranks_per_replica, std::size_t accumulation)
{
    CAPTURE(D);
    CAPTURE(J);
    CAPTURE(ranks_per_replica);
    CAPTURE(accumulation);
    const pipeline_options options{.batch = 4, .accumulation = accumulation, .replicas = D};
    // Global micro-batches of D x 4 examples.
    const test::micro_batches data(11, D * options.batch, 400 + 10 * D + J);
    auto simulated = pipeline_network::make_parameters<float>(3);
    std::vector<epoch_statistics> simulated_epochs;
    {
        test::simulator<J> pipeline(simulated, plain_sgd, test::constant_rate, options);
        simulated_epochs = test::train_epochs(pipeline, data, 2);
    }
    const first_ranks job(D * ranks_per_replica);
    if (job.communicator == MPI_COMM_NULL) return;
    ranks_pipeline<J> pipeline(job.communicator, 3, plain_sgd, test::constant_rate, options);
    CHECK(pipeline.replicas() == D);
    CHECK(pipeline.replica() == std::size_t(world_rank()) / ranks_per_replica);
    CHECK(std::size_t(pipeline.ranks()) == ranks_per_replica);
    // The memory plan of the rank's stages counts the buffers they gather
    // into, D copies of the larger of a stage's gradient sum and statistics.
    const auto plan = memory_plan<pipeline_network, cuts_of<J>>(options);
    std::size_t planned_exchange = 0;
    for (std::size_t j = pipeline.first_stage(); j < pipeline.end_stage(); ++j) {
        planned_exchange += plan.stage(j).replica_exchange;
    }
    CHECK(planned_exchange > 0);
    CHECK(pipeline.exchange_bytes() == planned_exchange);
    for (std::size_t epoch = 0; epoch < 2; ++epoch) {
        feed_epoch(pipeline, data);
        const epoch_statistics statistics = pipeline.drain();
        CHECK(statistics.micro_batches == D * 11);
        CHECK(statistics.examples == simulated_epochs[epoch].examples);
        CHECK(statistics.correct == simulated_epochs[epoch].correct);
        CHECK(statistics.loss_sum == simulated_epochs[epoch].loss_sum);
    }
    check_replica_result<J>(pipeline, job.communicator, simulated);
    // The sums above were started block by block during the backwards
    // (the epoch's last partial step, where a stage does not know the
    // epoch's size yet, sums at once): both ways give the simulator's bits.
    CHECK(pipeline.parts_started() > 0);
    // The forward-only pass, on replica 0, reaches every rank: the score
    // predict() gives with the simulator's network.
    const std::size_t count = data.labels[0].size();
    const inference_score score = pipeline.evaluate(data.images[0].data(), data.labels[0].data(), count, 3);
    using loss = classification<pipeline_network>::loss;
    double loss_sum = 0;
    std::size_t correct = 0;
    std::vector<float> logits(3 * pipeline_network::output::size);
    for (std::size_t first = 0; first < count; first += 3) {
        const std::size_t size = std::min<std::size_t>(3, count - first);
        predict(simulated,
                batch_view<const float, pipeline_network::input>(
                    data.images[0].data() + first * pipeline_network::input::size, size),
                batch_view<float, pipeline_network::output>(logits.data(), size));
        loss_sum += double(loss::evaluate(size, logits.data(), data.labels[0].data() + first, nullptr)) * double(size);
        correct += loss::correct(size, logits.data(), data.labels[0].data() + first);
    }
    CHECK(score.examples == count);
    CHECK(score.correct == correct);
    CHECK(score.loss_sum == loss_sum);
    // It trained.
    CHECK(!std::ranges::equal(simulated.values(), pipeline_network::make_parameters<float>(3).values()));
}

} // namespace

TEST_CASE("mpi replicas: D copies of a J-stage pipeline on ranks equal the simulator with D replicas, bit for bit")
{
    check_replicas_equal_simulation<2, 1>(1, 1);
    check_replicas_equal_simulation<2, 2>(1, 2);
    check_replicas_equal_simulation<2, 2>(2, 1);
    check_replicas_equal_simulation<2, 3>(2, 1);
    check_replicas_equal_simulation<2, 3>(3, 2);
    check_replicas_equal_simulation<3, 2>(1, 1);
    check_replicas_equal_simulation<3, 2>(2, 2);
}

TEST_CASE("mpi replicas: a rank count the replicas do not divide is refused on every rank")
{
    const first_ranks job(5);
    if (job.communicator == MPI_COMM_NULL) return;
    CHECK_THROWS_WITH_AS(
        (ranks_pipeline<3>(job.communicator, 1, plain_sgd, test::constant_rate, {.batch = 4, .replicas = 2})),
        "mpi pipeline: 5 ranks cannot hold 2 replicas of equal size; launch a multiple of the "
        "replicas.",
        std::invalid_argument);
}

TEST_CASE("mpi replicas: a checkpoint between epochs resumes under the same replicas, and refuses another count")
{
    constexpr std::size_t D = 2, J = 2;
    const pipeline_options options{.batch = 4, .replicas = D};
    const test::micro_batches data(7, D * options.batch, 77);
    auto simulated = pipeline_network::make_parameters<float>(6);
    {
        test::simulator<J> pipeline(simulated, plain_sgd, test::constant_rate, options);
        test::train_epochs(pipeline, data, 2);
    }
    const test::shared_directory directory("petra_replicas_");
    const std::string path = directory.file("replicas.checkpoint");
    const auto no_records = [](auto&) {};
    {
        const first_ranks job(4);
        if (job.communicator != MPI_COMM_NULL) {
            ranks_pipeline<J> pipeline(job.communicator, 6, plain_sgd, test::constant_rate, options);
            feed_epoch(pipeline, data);
            pipeline.drain();
            CHECK(save_mpi_checkpoint(path, pipeline_network::signature, pipeline, no_records) > 0);
            // Within an epoch the replicas' states differ: refused.
            feed_epoch(pipeline, data);
            CHECK_THROWS(save_mpi_checkpoint(directory.file("within_epoch.checkpoint"), pipeline_network::signature,
                                             pipeline, no_records));
            pipeline.drain();
        }
    }
    {
        // Resumed on other ranks per replica (1, threads), the same replicas.
        const first_ranks job(2);
        if (job.communicator != MPI_COMM_NULL) {
            ranks_pipeline<J> pipeline(job.communicator, 99, plain_sgd, test::constant_rate, options);
            load_mpi_checkpoint(path, pipeline_network::signature, pipeline, no_records);
            feed_epoch(pipeline, data);
            pipeline.drain();
            check_replica_result<J>(pipeline, job.communicator, simulated);
        }
    }
    {
        const first_ranks job(3);
        if (job.communicator != MPI_COMM_NULL) {
            ranks_pipeline<J> pipeline(job.communicator, 6, plain_sgd, test::constant_rate,
                                       {.batch = 4, .replicas = 3});
            std::string message;
            try {
                load_mpi_checkpoint(path, pipeline_network::signature, pipeline, no_records);
            } catch (const std::exception& error) {
                message = error.what();
            }
            CAPTURE(message);
            CHECK(message.find("it was saved by 2 replicas and this pipeline runs 3; resume with the same "
                               "replicas.") != std::string::npos);
        }
    }
}
