// The training loop over every method of one process: a run stopped and
// resumed from its checkpoint, on any of them, ends with the parameters of a
// run never stopped; a stop flag stops it at the next micro-batch, saved; a
// checkpoint of another plan, another network or other caller's settings is
// refused, named; a data source of the user's own, with state of its own,
// trains and resumes, and so does a labelled_images dataset, augmented;
// checkpoints on the clock.
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include <petra/petra.hpp>

#include "pipeline/pipeline_support.hpp"
#include "train/loop_support.hpp"

namespace {

using net = petra::test::pipeline_network;
using image_shape = net::input;
constexpr std::size_t micro_batch = 4;

using examples = petra::test::loop_examples;
using petra::test::parameter_digest;

const petra::sgd_options optimizer = petra::test::loop_optimizer;

petra::training_plan plan_of(std::size_t epochs, std::size_t batches_per_epoch = 10)
{
    return petra::training_plan(
        {.epochs = epochs, .batches_per_epoch = batches_per_epoch, .accumulation = 2},
        {.peak = 0.05, .warmup_epochs = 0.5, .shape = petra::learning_rate_schedule::decay::cosine});
}

struct temporary_directory {
    std::filesystem::path path =
        std::filesystem::temp_directory_path() / ("petra_loop_test_" + std::to_string(std::random_device{}()));
    temporary_directory() { std::filesystem::create_directories(path); }
    ~temporary_directory() { std::filesystem::remove_all(path); }
    std::string file(const std::string& name) const { return (path / name).string(); }
};

// What a run ends with.
struct run_end {
    bool finished = false;
    std::size_t steps = 0;
    std::uint64_t digest = 0;
    std::vector<petra::epoch_record> epochs;
};

// One run of Method (3 epochs, shuffled data) from the checkpoint at path
// if it exists; stop_at: the stop request's answer is yes at its
// (stop_at + 1)-th question (never if 0).
template <class Method>
run_end run(const std::string& path, std::size_t stop_at, std::size_t epochs = 3)
{
    const examples data;
    petra::tensor_source<image_shape> source(data.images, data.labels, micro_batch, /*seed=*/5);
    const petra::training_plan plan = plan_of(epochs);
    auto weights = net::make_parameters<float>(1);
    Method method(weights, optimizer, plan.schedule(), {.batch = micro_batch, .accumulation = 2});
    std::size_t asked = 0;
    petra::training_loop loop(method, source, plan,
                              {.checkpoint_path = path, .checkpoint_every = 3, .stop_requested = [&] {
                                   return stop_at != 0 && asked++ == stop_at;
                               }});
    run_end end;
    end.finished = loop.run();
    end.steps = loop.position().steps;
    [[maybe_unused]] const auto paused = method.pause();
    end.digest = parameter_digest(weights);
    end.epochs = loop.epochs();
    return end;
}

template <class Method>
void check_resume()
{
    const temporary_directory directory;
    const run_end whole = run<Method>("", 0);
    REQUIRE(whole.finished);
    CHECK(whole.steps == 30);
    REQUIRE(whole.epochs.size() == 3);
    CHECK(whole.epochs.back().train_loss < whole.epochs.front().train_loss);

    // Stopped at micro-batch 13 (epoch 2), then 9 micro-batches later, then
    // to the end: the same parameters and records as the run never stopped.
    const std::string path = directory.file("run.checkpoint");
    const run_end first = run<Method>(path, 13);
    CHECK_FALSE(first.finished);
    CHECK(first.steps == 13);
    CHECK(first.epochs.size() == 1);
    const run_end second = run<Method>(path, 9);
    CHECK_FALSE(second.finished);
    CHECK(second.steps == 22);
    const run_end last = run<Method>(path, 0);
    CHECK(last.finished);
    CHECK(last.steps == 30);
    CHECK(last.digest == whole.digest);
    REQUIRE(last.epochs.size() == 3);
    for (std::size_t e = 0; e < 3; ++e) {
        CHECK(last.epochs[e].train_loss == whole.epochs[e].train_loss);
        CHECK(last.epochs[e].train_accuracy == whole.epochs[e].train_accuracy);
        CHECK(last.epochs[e].learning_rate == whole.epochs[e].learning_rate);
    }
    // A finished run's checkpoint resumes to its end without training.
    const run_end again = run<Method>(path, 0);
    CHECK(again.digest == whole.digest);
    CHECK(again.steps == 30);
}

template <std::size_t J>
using on_threads = petra::petra_on_threads<net, petra::test::cuts_of<J>>;
template <std::size_t J>
using on_simulator = petra::petra_on_simulator<net, petra::test::cuts_of<J>>;

} // namespace

TEST_CASE("training loop: exact backprop stopped twice and resumed ends as a run never stopped" * doctest::timeout(300))
{
    check_resume<petra::exact_backprop_method<net>>();
}

TEST_CASE("training loop: reversible backprop stopped twice and resumed ends as a run never stopped" *
          doctest::timeout(300))
{
    check_resume<petra::reversible_backprop_method<net>>();
}

TEST_CASE("training loop: PETRA on threads stopped twice and resumed ends as a run never stopped" *
          doctest::timeout(300))
{
    check_resume<on_threads<3>>();
}

TEST_CASE("training loop: PETRA on the simulator stopped twice and resumed ends as a run never stopped" *
          doctest::timeout(300))
{
    check_resume<on_simulator<3>>();
}

TEST_CASE("training loop: a checkpoint saved on threads resumes on the simulator, and the numbers agree" *
          doctest::timeout(300))
{
    const temporary_directory directory;
    const run_end whole = run<on_threads<2>>("", 0);
    const std::string path = directory.file("run.checkpoint");
    CHECK_FALSE(run<on_threads<2>>(path, 17).finished);
    const run_end resumed = run<on_simulator<2>>(path, 0);
    CHECK(resumed.finished);
    CHECK(resumed.digest == whole.digest);
}

TEST_CASE("training loop: a stop flag set mid-run stops it before the next micro-batch, the checkpoint saved" *
          doctest::timeout(120))
{
    const temporary_directory directory;
    const examples data;
    petra::tensor_source<image_shape> source(data.images, data.labels, micro_batch);
    const petra::training_plan plan = plan_of(2);
    auto weights = net::make_parameters<float>(1);
    on_threads<2> method(weights, optimizer, plan.schedule(), {.batch = micro_batch, .accumulation = 2});
    std::atomic<bool> stop{false};
    std::vector<std::size_t> saved;
    petra::training_callbacks callbacks;
    // As a signal handler would: the flag is set while micro-batch 6 trains.
    callbacks.trained = [&](const petra::training_position& position, const petra::epoch_statistics&) {
        if (position.steps == 6) stop.store(true);
    };
    callbacks.checkpoint_saved = [&](std::size_t steps) { saved.push_back(steps); };
    const std::string path = directory.file("run.checkpoint");
    petra::training_loop loop(method, source, plan, {.checkpoint_path = path, .stop_flag = &stop}, callbacks);
    CHECK_FALSE(loop.run());
    CHECK(loop.position().steps == 6);
    CHECK(loop.position().epoch == 0);
    CHECK(loop.position().batch == 6);
    CHECK(saved == std::vector<std::size_t>{6});
    CHECK(std::filesystem::exists(path));
    CHECK(loop.last_checkpoint_bytes() > 0);
}

TEST_CASE("training loop: checkpoints of another plan, another network or other settings are refused, named" *
          doctest::timeout(120))
{
    const temporary_directory directory;
    const std::string path = directory.file("run.checkpoint");
    REQUIRE_FALSE(run<petra::exact_backprop_method<net>>(path, 4).finished);

    // Another epoch count: one sentence that names both figures.
    CHECK_THROWS_WITH_AS(run<petra::exact_backprop_method<net>>(path, 0, 4),
                         doctest::Contains("was saved by a run of 3 epochs, this one has 4: resume with the plan"),
                         std::invalid_argument);
    // Another network: the file's signature.
    using other_net = petra::network<petra::input<1, 6, 6>,
                                     petra::stem<petra::chain<petra::conv2d<1, 8>, petra::batch_norm<8>, petra::relu>>,
                                     petra::classifier_head<8, 3>>;
    {
        std::vector<float> images(40 * image_shape::size);
        std::vector<std::int32_t> labels(40);
        petra::tensor_source<image_shape> source(images, labels, micro_batch);
        const petra::training_plan plan = plan_of(3);
        auto weights = other_net::make_parameters<float>(1);
        petra::exact_backprop_method<other_net> method(weights, optimizer, plan.schedule(), {.batch = micro_batch});
        petra::training_loop loop(method, source, plan, {.checkpoint_path = path});
        CHECK_THROWS_WITH_AS(loop.run(), doctest::Contains("was written for another network"), petra::checkpoint_error);
    }
    // The caller's own settings, first in the file: the caller names them.
    const examples data;
    const petra::training_plan plan = plan_of(3);
    const auto run_with_seed = [&](std::size_t seed) {
        petra::tensor_source<image_shape> source(data.images, data.labels, micro_batch);
        auto weights = net::make_parameters<float>(1);
        petra::exact_backprop_method<net> method(weights, optimizer, plan.schedule(),
                                                 {.batch = micro_batch, .accumulation = 2});
        petra::training_callbacks callbacks;
        callbacks.save_records = [&](petra::checkpoint_writer& out) {
            out.section("my settings");
            std::size_t stored = seed;
            out.count(stored, petra::any_count);
        };
        callbacks.load_records = [&](petra::checkpoint_reader& in) {
            in.section("my settings");
            std::size_t stored = 0;
            in.count(stored, petra::any_count);
            if (stored != seed) throw std::invalid_argument("--seed: the checkpoint's run used another seed.");
        };
        std::size_t asked = 0;
        petra::training_loop loop(
            method, source, plan,
            {.checkpoint_path = directory.file("settings.checkpoint"), .stop_requested = [&] { return asked++ == 3; }},
            callbacks);
        return loop.run();
    };
    CHECK_FALSE(run_with_seed(1));
    CHECK_THROWS_WITH_AS(run_with_seed(2), doctest::Contains("--seed: the checkpoint's run used another seed"),
                         std::invalid_argument);
    CHECK_FALSE(run_with_seed(1)); // resumed at micro-batch 3, stopped again 3 later
    // A PETRA checkpoint of another stage count: its layout is named.
    REQUIRE_FALSE(run<on_simulator<2>>(directory.file("petra.checkpoint"), 4).finished);
    CHECK_THROWS_WITH_AS(run<on_simulator<3>>(directory.file("petra.checkpoint"), 0),
                         doctest::Contains("names 2 stage shards; this pipeline has 3 stages"),
                         petra::checkpoint_error);
}

namespace {

// A data source of the user's own: examples computed from their index, with
// a state (the micro-batches served) that the checkpoint must carry.
struct computed_examples {
    std::size_t served = 0;

    std::size_t batch_size() const { return micro_batch; }
    std::size_t batches_per_epoch() const { return 6; }
    void batch(std::size_t epoch, std::size_t index, petra::batch_view<float, image_shape> images,
               std::span<std::int32_t> labels)
    {
        for (std::size_t n = 0; n < micro_batch; ++n) {
            const std::size_t example = (index * micro_batch + n + 5 * epoch) % 24;
            labels[n] = std::int32_t(example % 3);
            for (std::size_t i = 0; i < image_shape::size; ++i) {
                images.data()[n * image_shape::size + i] = float(labels[n]) + 0.1f * float((example * 7 + i) % 5);
            }
        }
        ++served;
    }
    template <petra::state_archive Archive>
    void transfer_state(Archive& archive)
    {
        archive.section("computed examples");
        archive.count(served, petra::any_count);
    }
};
static_assert(petra::data_source<computed_examples, image_shape>);

} // namespace

TEST_CASE("training loop: a data source of the user's own trains, scores between epochs, and its state resumes" *
          doctest::timeout(120))
{
    const temporary_directory directory;
    const auto train = [&](const std::string& path, std::size_t stop_at, computed_examples& source) {
        const petra::training_plan plan = plan_of(3, 6);
        auto weights = net::make_parameters<float>(2);
        on_simulator<2> method(weights, optimizer, plan.schedule(), {.batch = micro_batch, .accumulation = 2});
        petra::training_callbacks callbacks;
        std::size_t evaluations = 0;
        callbacks.evaluate = [&] { return petra::test_score{.loss = 1.0, .accuracy = double(++evaluations)}; };
        std::size_t asked = 0;
        petra::training_loop loop(method, source, plan,
                                  {.checkpoint_path = path, .stop_requested = [&] { return asked++ == stop_at; }},
                                  callbacks);
        const bool finished = loop.run();
        [[maybe_unused]] const auto paused = method.pause();
        return std::pair{finished, std::pair{parameter_digest(weights), loop.epochs()}};
    };
    computed_examples whole_source;
    const auto whole = train("", 1000, whole_source);
    CHECK(whole.first);
    CHECK(whole_source.served == 18);
    REQUIRE(whole.second.second.size() == 3);
    CHECK(whole.second.second[2].test_accuracy == 3.0); // scored after each epoch

    const std::string path = directory.file("own.checkpoint");
    computed_examples first_source;
    CHECK_FALSE(train(path, 8, first_source).first);
    CHECK(first_source.served == 8);
    computed_examples resumed_source; // a new process: its count comes from the checkpoint
    const auto resumed = train(path, 1000, resumed_source);
    CHECK(resumed.first);
    CHECK(resumed_source.served == 18);
    CHECK(resumed.second.first == whole.second.first);
    // Epoch 1 was scored before the stop, as the first run's first score.
    CHECK(resumed.second.second[0].test_accuracy == 1.0);
}

TEST_CASE("training loop: checkpoints on the clock, and the data must fit the plan" * doctest::timeout(120))
{
    const temporary_directory directory;
    const examples data;
    petra::tensor_source<image_shape> source(data.images, data.labels, micro_batch, 3);
    const petra::training_plan plan = plan_of(1);
    auto weights = net::make_parameters<float>(1);
    petra::reversible_backprop_method<net> method(weights, optimizer, plan.schedule(), {.batch = micro_batch});
    std::size_t saves = 0;
    petra::training_callbacks callbacks;
    callbacks.checkpoint_saved = [&](std::size_t) { ++saves; };
    petra::training_loop loop(method, source, plan,
                              {.checkpoint_path = directory.file("clock.checkpoint"), .checkpoint_every_seconds = 1e-9},
                              callbacks);
    CHECK(loop.run());
    CHECK(saves == 10 + 1); // after every micro-batch, and at the end

    const petra::training_plan other = plan_of(1, 9);
    CHECK_THROWS_WITH_AS(petra::training_loop(method, source, other),
                         doctest::Contains("the data source has 10 micro-batches per epoch, the plan 9"),
                         std::invalid_argument);
}

TEST_CASE("training loop: a labelled_images dataset as the source, augmented, resumes with its generator's state" *
          doctest::timeout(120))
{
    const temporary_directory directory;
    const examples data;
    petra::labelled_images dataset{xt::xtensor<float, 4>::from_shape({40, 1, 6, 6}),
                                   xt::xtensor<std::int32_t, 1>::from_shape({40})};
    std::copy(data.images.begin(), data.images.end(), dataset.images.data());
    std::copy(data.labels.begin(), data.labels.end(), dataset.labels.data());
    const auto train = [&](const std::string& path, std::size_t stop_at) {
        petra::dataset_source<image_shape> source(dataset, dataset.size(), micro_batch, /*seed=*/3,
                                                  {.padding = 1, .flip = true, .fill = 0.0f});
        static_assert(petra::data_source<petra::dataset_source<image_shape>, image_shape>);
        const petra::training_plan plan = plan_of(3);
        auto weights = net::make_parameters<float>(1);
        petra::exact_backprop_method<net> method(weights, optimizer, plan.schedule(),
                                                 {.batch = micro_batch, .accumulation = 2});
        std::size_t asked = 0;
        petra::training_loop loop(method, source, plan,
                                  {.checkpoint_path = path, .stop_requested = [&] { return asked++ == stop_at; }});
        const bool finished = loop.run();
        return std::pair{finished, parameter_digest(weights)};
    };
    const auto whole = train("", 1000);
    CHECK(whole.first);
    const std::string path = directory.file("dataset.checkpoint");
    CHECK_FALSE(train(path, 15).first); // in epoch 2, its generator 5 micro-batches on
    const auto resumed = train(path, 1000);
    CHECK(resumed.first);
    CHECK(resumed.second == whole.second);
}
