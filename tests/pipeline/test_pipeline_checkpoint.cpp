// Checkpoints of a pipeline in flight: a run saved in the middle of an
// epoch and resumed in a new pipeline (of either driver) ends with the
// parameters, running statistics and epoch statistics of a run that was
// never interrupted, bit for bit, for J = 2, 3, 4, k = 1, 2 and every
// buffer configuration; the saved run itself goes on unchanged. A file
// with a sound checksum whose state the schedule never reaches is refused
// on load.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <unistd.h>
#include <vector>

#include <doctest/doctest.h>

#include <petra/petra.hpp>

#include "support.hpp"

#include "pipeline/pipeline_support.hpp"

using namespace petra;
using test::cuts_of;
using test::feed_range;
using test::pipeline_network;
using test::plain_sgd;
using test::simulator;
using test::threads;

namespace {

std::string temporary_path(const std::string& name) { return test::temporary_path(name + ".checkpoint"); }

// A learning rate that changes at every step, so that a step counter
// restored wrong shows.
double decaying_rate(std::size_t step) { return 0.03 / (1.0 + 0.05 * double(step)); }

struct run_result {
    network_parameters<pipeline_network, float> parameters{0};
    std::vector<epoch_statistics> epochs;
};

constexpr std::size_t micro_batches_per_epoch = 13;
constexpr std::size_t epochs = 3;

// The rest of epoch 1 from micro-batch `at`, then epoch 2.
template <class Pipeline>
void finish_run(Pipeline& pipeline, const test::micro_batches& data, std::size_t at, run_result& result)
{
    feed_range(pipeline, data, at, micro_batches_per_epoch);
    result.epochs.push_back(pipeline.drain());
    result.epochs.push_back(test::train_epochs(pipeline, data, 1).front());
}

template <class Pipeline>
run_result uninterrupted(const test::micro_batches& data, const pipeline_options& options)
{
    run_result result;
    result.parameters = pipeline_network::make_parameters<float>(7);
    Pipeline pipeline(result.parameters, plain_sgd, decaying_rate, options);
    result.epochs = test::train_epochs(pipeline, data, epochs);
    return result;
}

// Trains until micro-batch `at` of epoch 1, saves, and (the saved run)
// goes on to the end.
template <class Pipeline>
run_result saved_at(const test::micro_batches& data, const pipeline_options& options, std::size_t at,
                    const std::string& path)
{
    run_result result;
    result.parameters = pipeline_network::make_parameters<float>(7);
    Pipeline pipeline(result.parameters, plain_sgd, decaying_rate, options);
    result.epochs = test::train_epochs(pipeline, data, 1);
    feed_range(pipeline, data, 0, at);
    {
        checkpoint_writer out(path, pipeline_network::signature);
        pipeline.transfer_state(out);
        result.parameters.transfer_state(out);
        out.commit();
    }
    finish_run(pipeline, data, at, result);
    return result;
}

// A new pipeline, from parameters that are not those saved, restored and
// run to the end.
template <class Pipeline>
run_result resumed_from(const test::micro_batches& data, const pipeline_options& options, std::size_t at,
                        const std::string& path)
{
    run_result result;
    result.parameters = pipeline_network::make_parameters<float>(99);
    Pipeline pipeline(result.parameters, plain_sgd, decaying_rate, options);
    {
        checkpoint_reader in(path, pipeline_network::signature);
        pipeline.transfer_state(in);
        result.parameters.transfer_state(in);
        in.finish();
    }
    finish_run(pipeline, data, at, result);
    return result;
}

void check_same(const run_result& expected, const run_result& actual, std::size_t first_epoch)
{
    CHECK(std::equal(expected.parameters.values().begin(), expected.parameters.values().end(),
                     actual.parameters.values().begin()));
    CHECK(std::equal(expected.parameters.state().begin(), expected.parameters.state().end(),
                     actual.parameters.state().begin()));
    REQUIRE(actual.epochs.size() + first_epoch == expected.epochs.size());
    for (std::size_t e = 0; e < actual.epochs.size(); ++e) {
        CAPTURE(e);
        const epoch_statistics& want = expected.epochs[first_epoch + e];
        CHECK(actual.epochs[e].micro_batches == want.micro_batches);
        CHECK(actual.epochs[e].correct == want.correct);
        CHECK(actual.epochs[e].loss_sum == want.loss_sum);
    }
}

template <class Saving, class Resuming, class Reference>
void check_resume(const pipeline_options& options, std::size_t at)
{
    CAPTURE(options.accumulation);
    CAPTURE(options.input_buffer);
    CAPTURE(options.parameter_buffer);
    CAPTURE(at);
    const test::micro_batches data(micro_batches_per_epoch, 4, 21);
    const std::string path = temporary_path("resume");
    const run_result reference = uninterrupted<Reference>(data, options);
    const run_result saved = saved_at<Saving>(data, options, at, path);
    const run_result resumed = resumed_from<Resuming>(data, options, at, path);
    std::remove(path.c_str());
    check_same(reference, saved, 0);
    check_same(reference, resumed, 1);
    // The run did learn something: the parameters moved from the start.
    const auto initial = pipeline_network::make_parameters<float>(7);
    CHECK(!std::equal(initial.values().begin(), initial.values().end(), resumed.parameters.values().begin()));
}

template <std::size_t J>
void check_every_configuration()
{
    CAPTURE(J);
    // Interruption points from the epoch's start (nothing in flight) to
    // after its last micro-batch, through the pipeline's fill.
    constexpr std::array<std::size_t, 8> points{0, micro_batches_per_epoch, 1, 6, 12, 3, 9, 4};
    std::size_t configuration = 0;
    for (std::size_t accumulation : {1, 2}) {
        for (bool input_buffer : {false, true}) {
            for (bool parameter_buffer : {false, true}) {
                const pipeline_options options{.batch = 4,
                                               .accumulation = accumulation,
                                               .input_buffer = input_buffer,
                                               .parameter_buffer = parameter_buffer};
                const std::size_t at = points[(configuration++ + J) % points.size()];
                check_resume<threads<J>, threads<J>, simulator<J>>(options, at);
            }
        }
    }
}

} // namespace

TEST_CASE("pipeline checkpoint: an interrupted and resumed run equals an uninterrupted one" * doctest::timeout(300))
{
    check_every_configuration<2>();
    check_every_configuration<3>();
    check_every_configuration<4>();
}

TEST_CASE("pipeline checkpoint: a checkpoint of either driver resumes in the other" * doctest::timeout(120))
{
    const pipeline_options options{.batch = 4, .accumulation = 2};
    for (std::size_t at : {0, 1, 5, 13}) {
        check_resume<threads<3>, simulator<3>, threads<3>>(options, at);
        check_resume<simulator<3>, threads<3>, simulator<3>>(options, at);
    }
}

TEST_CASE("pipeline checkpoint: loading needs a fresh epoch and the same pipeline" * doctest::timeout(60))
{
    const test::micro_batches data(micro_batches_per_epoch, 4, 8);
    const std::string path = temporary_path("refused");
    auto parameters = pipeline_network::make_parameters<float>(1);
    {
        threads<3> pipeline(parameters, plain_sgd, decaying_rate, {.batch = 4});
        feed_range(pipeline, data, 0, 4);
        checkpoint_writer out(path, pipeline_network::signature);
        pipeline.transfer_state(out);
        out.commit();
        // Into a pipeline already fed this epoch: refused before reading.
        checkpoint_reader in(path, pipeline_network::signature);
        CHECK_THROWS_WITH_AS(pipeline.transfer_state(in),
                             "pipeline: a checkpoint can only be loaded before the epoch's first feed.",
                             std::logic_error);
        pipeline.drain();
    }
    {
        threads<2> other(parameters, plain_sgd, decaying_rate, {.batch = 4});
        checkpoint_reader in(path, pipeline_network::signature);
        CHECK_THROWS_WITH_AS(other.transfer_state(in), doctest::Contains("its stage count is 3, here it is 2"),
                             checkpoint_error);
    }
    {
        simulator<3> other(parameters, plain_sgd, decaying_rate, {.batch = 4, .accumulation = 2});
        checkpoint_reader in(path, pipeline_network::signature);
        CHECK_THROWS_WITH_AS(other.transfer_state(in), doctest::Contains("accumulation"), checkpoint_error);
    }
    {
        simulator<3> other(parameters, plain_sgd, decaying_rate, {.batch = 8});
        checkpoint_reader in(path, pipeline_network::signature);
        CHECK_THROWS_WITH_AS(other.transfer_state(in), doctest::Contains("micro-batch size is 4, here it is 8"),
                             checkpoint_error);
    }
    std::remove(path.c_str());
}

namespace {

// Forwards to a checkpoint writer its first `records` records only: a file
// with a valid checksum whose pipeline state stops part-way.
struct cut_short_writer {
    static constexpr bool loading = false;
    checkpoint_writer& out;
    std::size_t records;

    bool keep() { return records > 0 && records-- > 0; }
    void section(std::string_view name)
    {
        if (keep()) out.section(name);
    }
    void count(std::size_t& value, std::size_t limit)
    {
        if (keep()) out.count(value, limit);
    }
    void expect(std::size_t value, std::string_view what)
    {
        if (keep()) out.expect(value, what);
    }
    template <class T>
    void values(std::span<T> values)
    {
        if (keep()) out.values(values);
    }
    void text(std::string& text)
    {
        if (keep()) out.text(text);
    }
};
static_assert(state_archive<cut_short_writer>);

} // namespace

TEST_CASE("pipeline checkpoint: a load that fails part-way leaves a pipeline that reports it, never one that hangs" *
          doctest::timeout(60))
{
    const test::micro_batches data(micro_batches_per_epoch, 4, 9);
    const std::string path = temporary_path("cut_short");
    auto parameters = pipeline_network::make_parameters<float>(1);
    {
        threads<3> pipeline(parameters, plain_sgd, decaying_rate, {.batch = 4});
        feed_range(pipeline, data, 0, 6);
        checkpoint_writer out(path, pipeline_network::signature);
        cut_short_writer cut{out, 60};
        pipeline.transfer_state(cut);
        out.commit();
        pipeline.drain();
    }
    threads<3> restored(parameters, plain_sgd, decaying_rate, {.batch = 4});
    {
        checkpoint_reader in(path, pipeline_network::signature);
        CHECK_THROWS_AS(restored.transfer_state(in), checkpoint_error);
    }
    // Every later call reports that failure: no half-restored stage runs.
    CHECK_THROWS_AS(restored.drain(), checkpoint_error);
    CHECK_THROWS_AS(restored.feed(data.images[0], data.labels[0]), checkpoint_error);
    checkpoint_reader again(path, pipeline_network::signature);
    CHECK_THROWS_AS(restored.transfer_state(again), checkpoint_error);
    std::remove(path.c_str());
}

namespace {

// One shard per stage and a manifest (train/sharded_checkpoint.hpp), the
// format every driver shares with the MPI ranks.
template <class Pipeline>
run_result saved_in_shards_at(const test::micro_batches& data, const pipeline_options& options, std::size_t at,
                              const std::string& path)
{
    run_result result;
    result.parameters = pipeline_network::make_parameters<float>(7);
    Pipeline pipeline(result.parameters, plain_sgd, decaying_rate, options);
    result.epochs = test::train_epochs(pipeline, data, 1);
    feed_range(pipeline, data, 0, at);
    save_sharded_checkpoint(path, pipeline_network::signature, pipeline, [](auto&) {});
    finish_run(pipeline, data, at, result);
    return result;
}

template <class Pipeline>
run_result resumed_from_shards(const test::micro_batches& data, const pipeline_options& options, std::size_t at,
                               const std::string& path)
{
    run_result result;
    result.parameters = pipeline_network::make_parameters<float>(99);
    Pipeline pipeline(result.parameters, plain_sgd, decaying_rate, options);
    load_sharded_checkpoint(path, pipeline_network::signature, pipeline, [](auto&) {});
    finish_run(pipeline, data, at, result);
    return result;
}

// Forwards everything to a checkpoint writer but one record, changed: the
// n-th count after the k-th start of a section, or (labels) the first value
// of the n-th run of int32 values there. A file with a sound checksum whose pipeline
// state is one the schedule never reaches (found by fuzzing the reader).
struct tampering_writer {
    static constexpr bool loading = false;
    checkpoint_writer& out;
    std::string_view target_section;
    std::size_t occurrence; // which start of target_section (0: the first)
    bool labels;            // a run of int32 values, not a count
    std::size_t record;     // which count, or which run of int32 values, after it
    std::size_t new_value;
    bool tampered = false;

    std::size_t starts = 0;
    bool inside = false;
    std::size_t counts = 0, runs = 0;

    void section(std::string_view name)
    {
        inside = name == target_section && starts++ == occurrence;
        counts = runs = 0;
        out.section(name);
    }
    void count(std::size_t& value, std::size_t limit)
    {
        std::size_t written = value;
        if (inside && !labels && counts++ == record) {
            written = new_value;
            tampered = true;
        }
        out.count(written, std::max(limit, written));
    }
    void expect(std::size_t value, std::string_view what) { out.expect(value, what); }
    template <class T>
    void values(std::span<T> values)
    {
        if constexpr (std::is_same_v<T, std::int32_t>) {
            if (inside && labels && runs++ == record && !values.empty()) {
                std::vector<std::int32_t> changed(values.begin(), values.end());
                changed[0] = static_cast<std::int32_t>(new_value);
                tampered = true;
                out.values(std::span<std::int32_t>(changed));
                return;
            }
        }
        out.values(values);
    }
    void text(std::string& text) { out.text(text); }
};
static_assert(state_archive<tampering_writer>);

template <class Pipeline>
void load_into_new_pipeline(const std::string& path)
{
    auto parameters = pipeline_network::make_parameters<float>(2);
    Pipeline pipeline(parameters, plain_sgd, decaying_rate, {.batch = 4});
    checkpoint_reader in(path, pipeline_network::signature);
    pipeline.transfer_state(in);
    parameters.transfer_state(in);
    in.finish();
}

} // namespace

TEST_CASE("pipeline checkpoint: one shard per stage, saved by either driver, resumes in the other" *
          doctest::timeout(120))
{
    const test::micro_batches data(micro_batches_per_epoch, 4, 21);
    const std::string path = temporary_path("sharded");
    for (const pipeline_options& options :
         {pipeline_options{.batch = 4},
          pipeline_options{.batch = 4, .accumulation = 2, .input_buffer = true, .parameter_buffer = true}}) {
        for (std::size_t at : {0, 5}) {
            CAPTURE(at);
            const run_result reference = uninterrupted<simulator<3>>(data, options);
            check_same(reference, saved_in_shards_at<threads<3>>(data, options, at, path), 0);
            check_same(reference, resumed_from_shards<simulator<3>>(data, options, at, path), 1);
            check_same(reference, saved_in_shards_at<simulator<3>>(data, options, at, path), 0);
            check_same(reference, resumed_from_shards<threads<3>>(data, options, at, path), 1);
        }
    }
    for (std::size_t j = 0; j < 3; ++j) remove_stale_shards(path, 0, j);
    std::remove(path.c_str());
}

TEST_CASE("pipeline checkpoint: a save interrupted before its manifest leaves the previous one; a bad shard is named" *
          doctest::timeout(60))
{
    const test::micro_batches data(micro_batches_per_epoch, 4, 22);
    const std::string path = temporary_path("interrupted");
    const pipeline_options options{.batch = 4};
    const run_result reference = uninterrupted<simulator<3>>(data, options);
    {
        run_result saved;
        saved.parameters = pipeline_network::make_parameters<float>(7);
        simulator<3> pipeline(saved.parameters, plain_sgd, decaying_rate, options);
        test::train_epochs(pipeline, data, 1);
        feed_range(pipeline, data, 0, 4);
        save_sharded_checkpoint(path, pipeline_network::signature, pipeline, [](auto&) {});
        feed_range(pipeline, data, 4, 6);
        // The next save writes its shards, and dies before its manifest.
        for (std::size_t j = 0; j < 3; ++j) {
            write_checkpoint_shard(path, pipeline_network::signature, 77, j,
                                   [&](checkpoint_writer& out) { pipeline.transfer_stage_state(j, out); });
        }
    }
    check_same(reference, resumed_from_shards<threads<3>>(data, options, 4, path), 1);

    // Stage 2's shard cut short: refused, the shard named.
    const checkpoint_manifest manifest = read_checkpoint_manifest(path, pipeline_network::signature, 3, [](auto&) {});
    const std::string last = (std::filesystem::path(path).parent_path() / manifest.shards[2].file).string();
    std::filesystem::resize_file(last, manifest.shards[2].bytes - 1);
    {
        auto parameters = pipeline_network::make_parameters<float>(1);
        simulator<3> pipeline(parameters, plain_sgd, decaying_rate, options);
        const std::string named = "the shard of stage 2, '" + last + "', has";
        CHECK_THROWS_WITH_AS(load_sharded_checkpoint(path, pipeline_network::signature, pipeline, [](auto&) {}),
                             doctest::Contains(named.c_str()), checkpoint_error);
    }
    std::filesystem::remove(last);
    {
        auto parameters = pipeline_network::make_parameters<float>(1);
        simulator<3> pipeline(parameters, plain_sgd, decaying_rate, options);
        CHECK_THROWS_WITH_AS(load_sharded_checkpoint(path, pipeline_network::signature, pipeline, [](auto&) {}),
                             doctest::Contains("is missing"), checkpoint_error);
    }
    for (std::size_t j = 0; j < 3; ++j) remove_stale_shards(path, 0, j);
    std::remove(path.c_str());
}

TEST_CASE("pipeline checkpoint: a sound file whose state the schedule never reaches is refused on load, never one "
          "that hangs or fails mid-tick" *
          doctest::timeout(120))
{
    const test::micro_batches data(micro_batches_per_epoch, 4, 10);
    const std::string path = temporary_path("tampered");
    // After 3 micro-batches in 2 stages: stage 0 at tick 3 has
    // differentiated micro-batch 0; in flight are the activation of
    // micro-batch 2, the pair of micro-batch 1 and the labels of 2. In the
    // "stage worker" section of a stage, its optimizer's section "sgd" comes
    // before the counts: tick, epoch size known, epoch size, backward count.
    const struct {
        const char* what;
        std::string_view section;
        std::size_t occurrence;
        bool labels;
        std::size_t record, value;
    } cases[] = {
        {"stage 0 differentiated 3 micro-batches (drain never ended)", "sgd", 0, false, 3, 3},
        {"stage 0 knows an epoch size while micro-batches are still fed", "sgd", 0, false, 1, 1},
        {"the activation in flight is of another micro-batch", "forward into stage 1", 0, false, 1, 7},
        {"a label in flight is no class of the network", "labels", 0, true, 0, 15532034},
    };
    for (const auto& tampered : cases) {
        INFO(std::string(tampered.what));
        auto parameters = pipeline_network::make_parameters<float>(1);
        {
            simulator<2> pipeline(parameters, plain_sgd, decaying_rate, {.batch = 4});
            feed_range(pipeline, data, 0, 3);
            checkpoint_writer out(path, pipeline_network::signature);
            tampering_writer writer{
                out, tampered.section, tampered.occurrence, tampered.labels, tampered.record, tampered.value};
            pipeline.transfer_state(writer);
            parameters.transfer_state(out);
            out.commit();
            REQUIRE(writer.tampered);
        }
        CHECK_THROWS_WITH_AS(load_into_new_pipeline<simulator<2>>(path),
                             doctest::Contains("the checkpoint is inconsistent"), std::runtime_error);
        CHECK_THROWS_WITH_AS(load_into_new_pipeline<threads<2>>(path),
                             doctest::Contains("the checkpoint is inconsistent"), std::runtime_error);
    }
    // The last stage differentiates in the tick it forwards: between ticks
    // it has nothing in flight, and its input FIFO has no room. A file that
    // says otherwise is refused by the stage's count (its first record in
    // the "stage" section; stage 1 is the section's second occurrence),
    // before any FIFO is read. (Found by fuzz_checkpoint_reader: the FIFO
    // of no arrays divided by its depth.)
    {
        auto parameters = pipeline_network::make_parameters<float>(1);
        {
            simulator<2> pipeline(parameters, plain_sgd, decaying_rate, {.batch = 4});
            feed_range(pipeline, data, 0, 3);
            checkpoint_writer out(path, pipeline_network::signature);
            tampering_writer writer{out, "stage", 1, false, 0, 1};
            pipeline.transfer_state(writer);
            parameters.transfer_state(out);
            out.commit();
            REQUIRE(writer.tampered);
        }
        CHECK_THROWS_WITH_AS(load_into_new_pipeline<simulator<2>>(path),
                             doctest::Contains("found the count 1, above the limit 0"), checkpoint_error);
        CHECK_THROWS_WITH_AS(load_into_new_pipeline<threads<2>>(path),
                             doctest::Contains("found the count 1, above the limit 0"), checkpoint_error);
    }
    std::remove(path.c_str());
}

TEST_CASE("pipeline checkpoint: a FIFO refuses to load more arrays than it holds")
{
    const std::string path = temporary_path("fifo");
    {
        array_fifo<float> saved(2, 3);
        std::fill_n(saved.push(), 3, 1.0f);
        std::fill_n(saved.push(), 3, 2.0f);
        checkpoint_writer out(path, 0);
        saved.transfer_state(out, 2);
        out.commit();
    }
    {
        array_fifo<float> roomy(2, 3);
        checkpoint_reader in(path, 0);
        roomy.transfer_state(in, 2);
        in.finish();
        CHECK(roomy.count() == 2);
        CHECK(roomy.pop()[0] == 1.0f);
        CHECK(roomy.pop()[2] == 2.0f);
    }
    for (const std::size_t depth : {std::size_t(0), std::size_t(1)}) {
        INFO("depth " << depth);
        array_fifo<float> small(depth, 3);
        checkpoint_reader in(path, 0);
        CHECK_THROWS_WITH_AS(small.transfer_state(in, 2), doctest::Contains("cannot hold 2"), std::runtime_error);
        CHECK(small.count() == 0);
    }
    std::remove(path.c_str());
}
