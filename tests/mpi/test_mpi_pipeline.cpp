// PETRA's stages on MPI ranks compute what the sequential simulator
// computes, bit for bit: after 2 epochs of 27 micro-batches, the
// parameters, running statistics and epoch statistics are equal, for every
// J this launch's rank count can host among 2, 3, 4 (mpirun -np 2: J = 2, 4;
// -np 3: J = 3, 4), k = 1, 2 and the four buffer options. The forward-only
// evaluation through the ranks equals predict() on the whole network.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include <doctest/doctest.h>
#include <mpi.h>

#include <petra/mpi.hpp>
#include <petra/petra.hpp>

#include "mpi/mpi_support.hpp"
#include "pipeline/pipeline_support.hpp"

using namespace petra;
using test::cuts_of;
using test::pipeline_network;
using test::plain_sgd;

namespace {

using petra::test::world_rank;
using petra::test::world_size;
template <std::size_t J>
void check_ranks_equal_simulation(const pipeline_options& options)
{
    CAPTURE(J);
    CAPTURE(world_size());
    CAPTURE(options.accumulation);
    CAPTURE(options.input_buffer);
    CAPTURE(options.parameter_buffer);
    const test::micro_batches data(27, options.batch, 100 + J);
    auto simulated = pipeline_network::make_parameters<float>(3);
    std::vector<epoch_statistics> simulated_epochs, mpi_epochs;
    {
        sequential_pipeline<pipeline_network, cuts_of<J>, sgd<float>> pipeline(simulated, plain_sgd,
                                                                               test::constant_rate, options);
        simulated_epochs = test::train_epochs(pipeline, data, 2);
    }
    auto gathered = pipeline_network::make_parameters<float>(0);
    {
        mpi_pipeline<pipeline_network, cuts_of<J>, sgd<float>> pipeline(MPI_COMM_WORLD, 3, plain_sgd,
                                                                        test::constant_rate, options);
        CHECK(pipeline.ranks() == world_size());
        // A rank that hosts several stages runs them on threads.
        CHECK(pipeline.threaded() == (pipeline.end_stage() - pipeline.first_stage() > 1));
        for (std::size_t epoch = 0; epoch < 2; ++epoch) {
            for (std::size_t m = 0; m < data.images.size(); ++m) {
                if (pipeline.feeds()) pipeline.feed(data.images[m], data.labels[m]);
                else pipeline.feed();
            }
            mpi_epochs.push_back(pipeline.drain());
        }
        pipeline.gather_parameters(world_rank() == 0 ? &gathered : nullptr);
    }
    for (std::size_t e = 0; e < 2; ++e) {
        CHECK(mpi_epochs[e].micro_batches == 27);
        CHECK(mpi_epochs[e].loss_sum == simulated_epochs[e].loss_sum);
        CHECK(mpi_epochs[e].correct == simulated_epochs[e].correct);
        CHECK(mpi_epochs[e].examples == simulated_epochs[e].examples);
    }
    if (world_rank() == 0) {
        CHECK(std::ranges::equal(simulated.values(), gathered.values()));
        CHECK(std::ranges::equal(simulated.state(), gathered.state()));
        const auto initial = pipeline_network::make_parameters<float>(3);
        CHECK(!std::ranges::equal(initial.values(), gathered.values()));
    }
}

template <std::size_t J>
void check_every_option()
{
    if (std::size_t(world_size()) > J) return;
    for (std::size_t accumulation : {1, 2}) {
        for (bool input_buffer : {false, true}) {
            for (bool parameter_buffer : {false, true}) {
                check_ranks_equal_simulation<J>({.batch = 4,
                                                 .accumulation = accumulation,
                                                 .input_buffer = input_buffer,
                                                 .parameter_buffer = parameter_buffer});
            }
        }
        check_ranks_equal_simulation<J>({.batch = 4, .accumulation = accumulation, .delay_rate_exponent = 0.5});
    }
}

} // namespace

TEST_CASE("mpi pipeline: the ranks and the sequential simulator end with bit-identical parameters")
{
    check_every_option<2>();
    check_every_option<3>();
    check_every_option<4>();
}

TEST_CASE("mpi pipeline: each rank hosts a contiguous group of stages, and only its own parameters")
{
    constexpr std::size_t J = 4;
    mpi_pipeline<pipeline_network, cuts_of<J>, sgd<float>> pipeline(MPI_COMM_WORLD, 1, plain_sgd, test::constant_rate,
                                                                    {.batch = 4});
    const std::vector<std::size_t> groups = pipeline.stage_groups_of_ranks();
    REQUIRE(groups.size() == std::size_t(world_size()) + 1);
    CHECK(groups.front() == 0);
    CHECK(groups.back() == J);
    for (std::size_t r = 0; r + 1 < groups.size(); ++r) CHECK(groups[r] < groups[r + 1]);
    CHECK(pipeline.first_stage() == groups[std::size_t(world_rank())]);
    CHECK(pipeline.feeds() == (world_rank() == 0));
    CHECK(pipeline.scores() == (world_rank() == world_size() - 1));
    // The parameters and buffers of this rank's stages: fewer with more ranks.
    std::size_t largest = 0;
    const std::size_t mine = pipeline.memory_bytes();
    MPI_Allreduce(&mine, &largest, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    if (world_size() > 1) {
        auto whole = pipeline_network::make_parameters<float>(1);
        sequential_pipeline<pipeline_network, cuts_of<J>, sgd<float>> one_process(whole, plain_sgd, test::constant_rate,
                                                                                  {.batch = 4});
        const std::size_t parameter_bytes = (whole.values().size() + whole.state().size()) * sizeof(float);
        CHECK(largest < one_process.memory_bytes() + parameter_bytes);
    }
}

TEST_CASE("mpi pipeline: a forward-only pass through the ranks scores as predict() on the whole network")
{
    constexpr std::size_t J = 4;
    if (std::size_t(world_size()) > J) return;
    const test::micro_batches data(6, 4, 9);
    mpi_pipeline<pipeline_network, cuts_of<J>, sgd<float>> pipeline(MPI_COMM_WORLD, 5, plain_sgd, test::constant_rate,
                                                                    {.batch = 4});
    for (std::size_t m = 0; m < data.images.size(); ++m) {
        if (pipeline.feeds()) pipeline.feed(data.images[m], data.labels[m]);
        else pipeline.feed();
    }
    pipeline.drain();
    std::vector<float> images;
    std::vector<std::int32_t> labels;
    for (std::size_t m = 0; m < data.images.size(); ++m) {
        images.insert(images.end(), data.images[m].begin(), data.images[m].end());
        labels.insert(labels.end(), data.labels[m].begin(), data.labels[m].end());
    }
    const std::size_t count = labels.size(); // 24, in chunks of 10: 10, 10, 4
    const inference_score score = pipeline.evaluate(images.data(), labels.data(), count, 10);
    auto whole = pipeline_network::make_parameters<float>(0);
    pipeline.gather_parameters(&whole, 0);
    if (world_rank() != 0) return;
    using loss = classification<pipeline_network>::loss;
    double loss_sum = 0;
    std::size_t correct = 0;
    std::vector<float> logits(10 * 3);
    for (std::size_t first = 0; first < count; first += 10) {
        const std::size_t size = std::min<std::size_t>(10, count - first);
        predict(whole, batch_view<const float, pipeline_network::input>(images.data() + first * 36, size),
                batch_view<float, pipeline_network::output>(logits.data(), size));
        loss_sum += double(loss::evaluate(size, logits.data(), labels.data() + first, nullptr)) * double(size);
        correct += loss::correct(size, logits.data(), labels.data() + first);
    }
    CHECK(score.examples == count);
    CHECK(score.correct == correct);
    CHECK(score.loss_sum == loss_sum);
}

TEST_CASE("mpi pipeline: every rank learns the epoch's statistics so far, one micro-batch late, as the scoring rank "
          "had them")
{
    constexpr std::size_t J = 3;
    if (std::size_t(world_size()) > J) return;
    const test::micro_batches data(10, 4, 11);
    auto simulated = pipeline_network::make_parameters<float>(2);
    std::vector<epoch_statistics> expected; // after each feed
    {
        sequential_pipeline<pipeline_network, cuts_of<J>, sgd<float>> pipeline(simulated, plain_sgd,
                                                                               test::constant_rate, {.batch = 4});
        for (std::size_t m = 0; m < data.images.size(); ++m) {
            pipeline.feed(data.images[m], data.labels[m]);
            expected.push_back(pipeline.progress());
        }
        pipeline.drain();
    }
    mpi_pipeline<pipeline_network, cuts_of<J>, sgd<float>> pipeline(MPI_COMM_WORLD, 2, plain_sgd, test::constant_rate,
                                                                    {.batch = 4});
    for (std::size_t m = 0; m < data.images.size(); ++m) {
        pipeline.feed(data.images[m], data.labels[m]);
        const epoch_statistics so_far = pipeline.progress();
        CAPTURE(m);
        if (pipeline.scores()) { // as after feed m
            CHECK(so_far.micro_batches == expected[m].micro_batches);
            CHECK(so_far.loss_sum == expected[m].loss_sum);
            continue;
        }
        if (m == 0) continue;
        CHECK(so_far.micro_batches == expected[m - 1].micro_batches);
        CHECK(so_far.correct == expected[m - 1].correct);
        CHECK(so_far.loss_sum == expected[m - 1].loss_sum);
    }
    pipeline.drain();
}

TEST_CASE("mpi pipeline: feed takes pointers, a view, an owned_batch and tensors as the other drivers do, and refuses "
          "a label count other than the micro-batch's")
{
    // Each rank alone (MPI_COMM_SELF hosts both stages), so that a refusal
    // on the rank that feeds leaves no other rank waiting.
    const test::micro_batches data(5, 3, 13);
    auto simulated = pipeline_network::make_parameters<float>(6);
    epoch_statistics expected;
    {
        sequential_pipeline<pipeline_network, cuts_of<2>, sgd<float>> pipeline(simulated, plain_sgd,
                                                                               test::constant_rate, {.batch = 3});
        expected = test::train_epochs(pipeline, data, 1).front();
    }
    for (int form = 0; form < 4; ++form) {
        CAPTURE(form);
        mpi_pipeline<pipeline_network, cuts_of<2>, sgd<float>> pipeline(MPI_COMM_SELF, 6, plain_sgd,
                                                                        test::constant_rate, {.batch = 3});
        for (std::size_t m = 0; m < data.images.size(); ++m) {
            const owned_batch<float, pipeline_network::input>& images = data.images[m];
            const std::vector<std::int32_t>& labels = data.labels[m];
            if (form == 0) pipeline.feed(images.data(), labels.data());
            if (form == 1) pipeline.feed(images.view(), labels);
            if (form == 2) pipeline.feed(images, labels);
            if (form == 3) {
                auto image_tensor = xt::xtensor<float, 4>::from_shape({3, 1, 6, 6});
                std::copy(images.begin(), images.end(), image_tensor.begin());
                pipeline.feed(image_tensor, labels);
            }
        }
        const epoch_statistics epoch = pipeline.drain();
        auto gathered = pipeline_network::make_parameters<float>(0);
        pipeline.gather_parameters(&gathered);
        CHECK(epoch.loss_sum == expected.loss_sum);
        CHECK(std::ranges::equal(gathered.values(), simulated.values()));
    }
    mpi_pipeline<pipeline_network, cuts_of<2>, sgd<float>> pipeline(MPI_COMM_SELF, 6, plain_sgd, test::constant_rate,
                                                                    {.batch = 3});
    CHECK_THROWS_WITH_AS(pipeline.feed(data.images[0], std::vector<std::int32_t>{0, 1}),
                         "pipeline feed: 3 images and 2 labels; every micro-batch holds 3 of each.",
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(pipeline.feed(nullptr, nullptr),
                         "mpi pipeline: the rank that feeds needs the images and labels.", std::invalid_argument);
    pipeline.drain(); // nothing was fed
}
