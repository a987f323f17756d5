// The job's data: both splits of Fashion-MNIST, checked against the
// network's input, and the training micro-batches in each epoch's order,
// augmented when the recipe asks (petra::dataset_source).
#pragma once

#include <cstddef>
#include <cstdint>
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
// and their labels, as the training loop hands it to a method.
using micro_batch = petra::training_batch<image>;

// The training set cut into micro-batches: each epoch a permutation drawn
// from (seed, epoch), augmented when the recipe asks (the generator's state
// in the checkpoint). train_size: the training set's size, also where train
// is empty (a process that does not read the data).
inline petra::dataset_source<image> training_micro_batches(const training_recipe& recipe,
                                                           const petra::labelled_images& train, std::size_t train_size)
{
    const petra::augmentation augment{.padding = 2, .flip = true, .fill = petra::fashion_mnist_normalisation.black()};
    return {train, train_size, recipe.global_batch(), recipe.seed, recipe.augment ? augment : petra::augmentation{}};
}

} // namespace fashion
