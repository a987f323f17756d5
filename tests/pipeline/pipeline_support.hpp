// What the pipeline tests share: a small network with blocks of every kind,
// generated micro-batches, and runs of either driver.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include <petra/petra.hpp>

namespace petra::test {

// Six blocks: stem, two additive couplings, a downsampling, a RevNet
// coupling, the head; 6 x 6 images, 3 classes.
using pipeline_network = network<input<1, 6, 6>, stem<chain<conv2d<1, 8>, batch_norm<8>, relu>>,
                                 repeated<2, additive_coupling<residual_function<4>>>, downsampling<4>,
                                 revnet_coupling<residual_function<8>, residual_function<8>>, classifier_head<16, 3>>;

// Micro-batches as a user holds them: each an owned_batch of images and a
// vector of as many labels.
struct micro_batches {
    std::size_t batch;
    std::vector<owned_batch<float, pipeline_network::input>> images;
    std::vector<std::vector<std::int32_t>> labels;

    micro_batches(std::size_t count, std::size_t batch_size, std::uint64_t seed) : batch(batch_size)
    {
        std::mt19937_64 generator(seed);
        for (std::size_t m = 0; m < count; ++m) {
            owned_batch<float, pipeline_network::input> values(batch);
            for (float& value : values) value = float(standard_normal(generator));
            std::vector<std::int32_t> classes(batch);
            for (auto& value : classes) value = uniform_int(generator, std::int32_t{0}, std::int32_t{2});
            // Class-dependent brightness, so that there is something to learn.
            for (std::size_t n = 0; n < batch; ++n) {
                for (std::size_t i = 0; i < pipeline_network::input::size; ++i) {
                    values.data()[n * pipeline_network::input::size + i] += 0.5f * float(classes[n]);
                }
            }
            images.push_back(std::move(values));
            labels.push_back(std::move(classes));
        }
    }
};

inline double constant_rate(std::size_t) { return 0.02; }

// The optimizer settings of the paper's experiments, and the balanced cuts
// of pipeline_network into J stages.
constexpr sgd_options plain_sgd{.momentum = 0.9, .nesterov = true, .weight_decay = 5e-4};
template <std::size_t J>
constexpr auto cuts_of = partition<pipeline_network, J>();

// The two drivers of pipeline_network in J stages with that optimizer.
template <std::size_t J>
using threads = thread_pipeline<pipeline_network, cuts_of<J>, sgd<float>>;
template <std::size_t J>
using simulator = sequential_pipeline<pipeline_network, cuts_of<J>, sgd<float>>;

// Feeds micro-batches [first, end) of the data.
template <class Pipeline>
void feed_range(Pipeline& pipeline, const micro_batches& data, std::size_t first, std::size_t end)
{
    for (std::size_t m = first; m < end; ++m) pipeline.feed(data.images[m], data.labels[m]);
}

// Feeds every micro-batch, once per epoch, then drains; returns the epochs'
// statistics.
template <class Pipeline>
std::vector<epoch_statistics> train_epochs(Pipeline& pipeline, const micro_batches& data, std::size_t epochs)
{
    std::vector<epoch_statistics> statistics;
    for (std::size_t epoch = 0; epoch < epochs; ++epoch) {
        for (std::size_t m = 0; m < data.images.size(); ++m) {
            pipeline.feed(data.images[m], data.labels[m]);
        }
        statistics.push_back(pipeline.drain());
    }
    return statistics;
}

} // namespace petra::test
