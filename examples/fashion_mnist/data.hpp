// The job's data: both splits of Fashion-MNIST, checked against the
// network's input, and the training micro-batches in each epoch's order,
// augmented when the recipe asks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <petra/petra.hpp>

#include "model.hpp"
#include "options.hpp"

namespace fashion {

// Both splits, and their sizes: a process that does not read the files (an
// MPI rank that does not feed) holds empty sets and the sizes alone.
struct job_data {
    petra::labelled_images train;
    petra::labelled_images test;
    std::size_t train_size = 0;
    std::size_t test_size = 0;
};

// Loads the IDX files (gzip) in data_dir. Throws petra::data_error for
// missing or bad files and images of another size than the network takes,
// std::invalid_argument when the training set holds less than one batch.
inline job_data load_data(const std::string& data_dir, std::size_t batch)
{
    static_assert(image::channels == 1, "IDX images have one channel: the network must take one.");
    const std::string dir = data_dir.empty() || data_dir.back() == '/' ? data_dir : data_dir + "/";
    auto split = [&](const std::string& prefix) {
        return petra::load_idx_dataset(dir + prefix + "-images-idx3-ubyte.gz", dir + prefix + "-labels-idx1-ubyte.gz",
                                       classes, petra::fashion_mnist_normalisation);
    };
    job_data data{split("train"), split("t10k")};
    data.train_size = data.train.size();
    data.test_size = data.test.size();
    for (const petra::labelled_images* set : {&data.train, &data.test}) {
        if (set->images.shape()[2] != image::height || set->images.shape()[3] != image::width) {
            throw petra::data_error(dir + ": the networks take " + std::to_string(image::height) + " x " +
                                    std::to_string(image::width) + " images.");
        }
    }
    if (data.train.size() < batch) {
        throw std::invalid_argument("--batch " + std::to_string(batch) + " is larger than the " +
                                    std::to_string(data.train.size()) + " training images.");
    }
    return data;
}

// One micro-batch, contiguous: images (batch x channels x height x width)
// and their labels. Valid until the next one is loaded.
struct micro_batch {
    const xt::xtensor<float, 4>& images;
    const xt::xtensor<std::int32_t, 1>& labels;
};

// The training set cut into micro-batches: each epoch a permutation drawn
// from (seed, epoch), so that any epoch can be rebuilt on resume.
class micro_batches {
public:
    // train_size: the training set's size, also where train is empty (a
    // process that does not read the data; it never calls load()).
    micro_batches(const training_recipe& recipe, const petra::labelled_images& train, std::size_t train_size)
        : train_(train), order_(train_size, recipe.batch, recipe.seed), augment_(recipe.augment),
          images_(xt::xtensor<float, 4>::from_shape({recipe.batch, image::channels, image::height, image::width})),
          labels_(xt::xtensor<std::int32_t, 1>::from_shape({recipe.batch}))
    {
    }

    std::size_t per_epoch() const { return order_.batches(); }

    // The seed of an epoch's augmentation generator.
    static std::uint64_t augmentation_seed(std::uint64_t seed, std::size_t epoch) { return seed * 1000003 + epoch; }

    void start_epoch(std::size_t epoch) { order_.shuffle(epoch); }

    // Micro-batch `index` of the current epoch, augmented (when asked) with
    // draws from the epoch's generator.
    micro_batch load(std::size_t index, std::mt19937_64& generator)
    {
        if (train_.size() == 0) throw std::logic_error("micro_batches: this process holds no training data.");
        petra::gather_batch(train_, order_.batch(index), images_.data(), labels_.data());
        if (augment_) {
            petra::augment_batch(images_,
                                 {.padding = 2, .flip = true, .fill = petra::fashion_mnist_normalisation.black()},
                                 generator, augmentation_scratch_);
        }
        return {images_, labels_};
    }

    // What a process that does not read the data passes on: buffers of the
    // micro-batch's shape, never filled.
    micro_batch not_loaded() const { return {images_, labels_}; }

private:
    const petra::labelled_images& train_;
    petra::batch_order order_;
    bool augment_;
    xt::xtensor<float, 4> images_;
    xt::xtensor<std::int32_t, 1> labels_;
    std::vector<float> augmentation_scratch_;
};

} // namespace fashion
