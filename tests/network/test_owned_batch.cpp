// owned_batch: a batch in memory of its own, aligned, passed as it is where
// a view is taken (predict, both trainers, a pipeline's feed). And feed's
// forms, the same in both drivers (pipeline/core.hpp): pointers, a view and
// an owned_batch give the same numbers, and a label count other than the
// micro-batch's is refused before anything is fed, leaving the pipeline
// usable.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include <doctest/doctest.h>

#include <petra/petra.hpp>

#include "pipeline/pipeline_support.hpp"

using namespace petra;
using test::pipeline_network;

namespace {

using images_of = owned_batch<float, pipeline_network::input>;
using logits_of = owned_batch<float, pipeline_network::output>;

static_assert(std::is_convertible_v<images_of&, batch_view<float, pipeline_network::input>>);
static_assert(std::is_convertible_v<images_of&, batch_view<const float, pipeline_network::input>>);
static_assert(std::is_convertible_v<const images_of&, batch_view<const float, pipeline_network::input>>);
static_assert(!std::is_convertible_v<const images_of&, batch_view<float, pipeline_network::input>>,
              "a const owned_batch gives only read-only views");

} // namespace

TEST_CASE("owned_batch: holds batch examples of its shape, aligned and zeroed, and is seen as a view of them")
{
    images_of images(5);
    CHECK(images.batch() == 5);
    CHECK(images.size() == 5 * pipeline_network::input::size);
    CHECK(images.values().size() == images.size());
    CHECK(reinterpret_cast<std::uintptr_t>(images.data()) % kernels::buffer_alignment == 0);
    CHECK(std::all_of(images.begin(), images.end(), [](float value) { return value == 0.0f; }));

    const batch_view<float, pipeline_network::input> writable = images;
    CHECK(writable.data() == images.data());
    CHECK(writable.batch() == 5);
    const images_of& read_only = images;
    const const_batch<float, pipeline_network::input> view = read_only;
    CHECK(view.data() == images.data());
    CHECK(view.size() == images.size());

    const images_of empty;
    CHECK(empty.batch() == 0);
    CHECK(!empty.view());
}

TEST_CASE("owned_batch: predict and both trainers take it as they take pointers")
{
    const test::micro_batches data(1, 4, 21);
    const images_of& images = data.images[0];
    const auto parameters = pipeline_network::make_parameters<float>(2);

    std::vector<float> expected(4 * pipeline_network::output::size);
    predict(parameters, 4, images.data(), expected.data());
    logits_of logits(4);
    predict(parameters, images, logits);
    CHECK(std::ranges::equal(logits.values(), expected));

    const auto check_trainer = [&](auto& trainer) {
        auto by_pointer = pipeline_network::make_parameters<float>(2), by_batch = by_pointer;
        std::vector<float> pointer_gradient(pipeline_network::parameter_count), batch_gradient(pointer_gradient.size());
        const float pointer_loss =
            trainer.accumulate_gradient(by_pointer, 4, images.data(), data.labels[0].data(), pointer_gradient);
        const float batch_loss = trainer.accumulate_gradient(by_batch, images, data.labels[0], batch_gradient);
        CHECK(pointer_loss == batch_loss);
        CHECK(pointer_gradient == batch_gradient);
    };
    exact_backprop<pipeline_network, float> exact(4);
    reversible_backprop<pipeline_network, float> reversible(4);
    check_trainer(exact);
    check_trainer(reversible);
}

namespace {

// Feeds every micro-batch in the form `form` names (0: pointers, 1: a view
// of the caller's memory, 2: the owned_batch), then drains.
template <class Pipeline>
epoch_statistics feed_epoch(Pipeline& pipeline, const test::micro_batches& data, int form)
{
    for (std::size_t m = 0; m < data.images.size(); ++m) {
        const images_of& images = data.images[m];
        const std::vector<std::int32_t>& labels = data.labels[m];
        if (form == 0) pipeline.feed(images.data(), labels.data());
        if (form == 1)
            pipeline.feed(batch_view<const float, pipeline_network::input>(images.data(), data.batch), labels);
        if (form == 2) pipeline.feed(images, labels);
    }
    return pipeline.drain();
}

template <template <std::size_t> class Driver>
void check_feed_forms()
{
    const test::micro_batches data(7, 3, 22);
    auto expected = pipeline_network::make_parameters<float>(4);
    epoch_statistics expected_epoch;
    {
        Driver<2> pipeline(expected, test::plain_sgd, test::constant_rate, {.batch = 3});
        expected_epoch = feed_epoch(pipeline, data, 0);
    }
    for (int form = 1; form <= 2; ++form) {
        CAPTURE(form);
        auto parameters = pipeline_network::make_parameters<float>(4);
        Driver<2> pipeline(parameters, test::plain_sgd, test::constant_rate, {.batch = 3});
        const epoch_statistics epoch = feed_epoch(pipeline, data, form);
        CHECK(epoch.loss_sum == expected_epoch.loss_sum);
        CHECK(epoch.correct == expected_epoch.correct);
        CHECK(std::ranges::equal(parameters.values(), expected.values()));
        CHECK(std::ranges::equal(parameters.state(), expected.state()));
    }
}

template <template <std::size_t> class Driver>
void check_label_count_refused()
{
    const test::micro_batches data(3, 3, 23);
    auto expected = pipeline_network::make_parameters<float>(5), refused = expected;
    Driver<2> reference(expected, test::plain_sgd, test::constant_rate, {.batch = 3});
    Driver<2> pipeline(refused, test::plain_sgd, test::constant_rate, {.batch = 3});
    const std::vector<std::int32_t> two_labels(data.labels[0].begin(), data.labels[0].begin() + 2);
    CHECK_THROWS_WITH_AS(pipeline.feed(data.images[0], two_labels),
                         "pipeline feed: 3 images and 2 labels; every micro-batch holds 3 of each.",
                         std::invalid_argument);
    const images_of four(4);
    CHECK_THROWS_WITH_AS(pipeline.feed(four, std::vector<std::int32_t>(4)),
                         "pipeline feed: 4 images and 4 labels; every micro-batch holds 3 of each.",
                         std::invalid_argument);
    // Nothing was fed: the epoch goes on as one never refused.
    const epoch_statistics after_refusals = test::train_epochs(pipeline, data, 1).front();
    const epoch_statistics never_refused = test::train_epochs(reference, data, 1).front();
    CHECK(after_refusals.micro_batches == 3);
    CHECK(after_refusals.loss_sum == never_refused.loss_sum);
    CHECK(std::ranges::equal(refused.values(), expected.values()));
}

} // namespace

TEST_CASE("feed: pointers, a view and an owned_batch train the simulator alike")
{
    check_feed_forms<test::simulator>();
}

TEST_CASE("feed: pointers, a view and an owned_batch train the threads alike") { check_feed_forms<test::threads>(); }

TEST_CASE("feed: a label count other than the micro-batch's is refused, and nothing is fed")
{
    check_label_count_refused<test::simulator>();
    check_label_count_refused<test::threads>();
}
