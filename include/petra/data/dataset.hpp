// Labelled image datasets in memory, and their batches (floor 9: data).
//
//   auto train = load_idx_dataset(dir + "/train-images-idx3-ubyte.gz",
//                                 dir + "/train-labels-idx1-ubyte.gz", 10, fashion_mnist_normalisation);
//   batch_order order(train.size(), 64, /*seed=*/1);      // shuffled, full batches only
//   order.shuffle(epoch);
//   for (std::size_t b = 0; b < order.batches(); ++b) {
//       gather_batch(train, order.batch(b), images, labels); // contiguous NCHW + labels
//       ...
//   }
//
// Images are stored as float, normalised per pixel: (value / 255 - mean) /
// deviation, one channel; an xtensor of shape (N, 1, H, W).
#pragma once

#if !(defined(__cpp_exceptions) || defined(__EXCEPTIONS))
#error "petra: data/dataset.hpp needs exceptions: it reports its errors with them only (see error.hpp)."
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <xtensor/xtensor.hpp>

#include <petra/data/idx.hpp>
#include <petra/random.hpp>

namespace petra {

struct normalisation {
    float mean;
    float deviation;

    // A black pixel (value 0) after normalisation.
    constexpr float black() const { return -mean / deviation; }
};

// Fashion-MNIST's training set: mean 0.2860 and standard deviation 0.3530 of
// its pixels scaled to [0, 1].
inline constexpr normalisation fashion_mnist_normalisation{0.2860f, 0.3530f};

struct labelled_images {
    xt::xtensor<float, 4> images;        // N x 1 x H x W
    xt::xtensor<std::int32_t, 1> labels; // N, each in [0, classes)

    std::size_t size() const { return labels.size(); }
    std::size_t image_size() const { return images.shape()[1] * images.shape()[2] * images.shape()[3]; }
};

// Reads an IDX image file (N x H x W bytes) and an IDX label file (N bytes),
// checks that they agree and that every label is below classes, and
// normalises the images. Throws data_error naming the file and the problem.
inline labelled_images load_idx_dataset(const std::string& images_path, const std::string& labels_path,
                                        std::size_t classes, normalisation scale)
{
    const xt::xarray<std::uint8_t> images = read_idx(images_path);
    const xt::xarray<std::uint8_t> labels = read_idx(labels_path);
    if (images.dimension() != 3) {
        throw data_error(images_path + ": images need 3 dimensions (count, height, width); the file has " +
                         std::to_string(images.dimension()) + ".");
    }
    if (labels.dimension() != 1) {
        throw data_error(labels_path + ": labels need 1 dimension; the file has " + std::to_string(labels.dimension()) +
                         ".");
    }
    const std::size_t count = images.shape()[0], height = images.shape()[1], width = images.shape()[2];
    if (labels.shape()[0] != count) {
        throw data_error(labels_path + ": " + std::to_string(labels.shape()[0]) + " labels for the " +
                         std::to_string(count) + " images of " + images_path + ".");
    }
    labelled_images dataset;
    dataset.images = xt::xtensor<float, 4>::from_shape({count, 1, height, width});
    dataset.labels = xt::xtensor<std::int32_t, 1>::from_shape({count});
    const float factor = 1.0f / (255.0f * scale.deviation), offset = -scale.mean / scale.deviation;
    std::transform(images.begin(), images.end(), dataset.images.begin(),
                   [&](std::uint8_t value) { return float(value) * factor + offset; });
    for (std::size_t n = 0; n < count; ++n) {
        if (labels(n) >= classes) {
            throw data_error(labels_path + ": label " + std::to_string(unsigned(labels(n))) + " of example " +
                             std::to_string(n) + " is not below the " + std::to_string(classes) + " classes.");
        }
        dataset.labels(n) = std::int32_t(labels(n));
    }
    return dataset;
}

// The order in which an epoch visits a dataset: a permutation drawn from
// (seed, epoch), so that any epoch's order can be rebuilt (to resume a run),
// cut into full batches; the last size % batch examples of the permutation
// are left out of that epoch.
class batch_order {
public:
    batch_order(std::size_t size, std::size_t batch, std::uint64_t seed) : order_(size), batch_(batch), seed_(seed)
    {
        if (batch == 0 || batch > size) {
            throw std::invalid_argument("batch_order: a batch of " + std::to_string(batch) +
                                        " examples does not fit a dataset of " + std::to_string(size) + ".");
        }
        std::iota(order_.begin(), order_.end(), std::size_t{0});
    }

    // The permutation of epoch `epoch`: drawn afresh from the identity, so
    // that it depends on (seed, epoch) only, not on earlier calls.
    void shuffle(std::size_t epoch)
    {
        std::iota(order_.begin(), order_.end(), std::size_t{0});
        std::mt19937_64 generator(seed_ ^ (0x9e3779b97f4a7c15ull * (epoch + 1)));
        petra::shuffle(order_.begin(), order_.end(), generator); // random.hpp: the same order on every library
    }

    std::size_t batches() const { return order_.size() / batch_; }
    std::size_t batch_size() const { return batch_; }
    std::span<const std::size_t> batch(std::size_t index) const
    {
        return std::span<const std::size_t>(order_).subspan(index * batch_, batch_);
    }

private:
    std::vector<std::size_t> order_;
    std::size_t batch_;
    std::uint64_t seed_;
};

// Copies the examples `indices` of dataset into contiguous buffers: images
// (indices.size() x image_size values, NCHW) and labels.
inline void gather_batch(const labelled_images& dataset, std::span<const std::size_t> indices, float* images,
                         std::int32_t* labels)
{
    const std::size_t size = dataset.image_size();
    for (std::size_t i = 0; i < indices.size(); ++i) {
        const float* source = dataset.images.data() + indices[i] * size;
        std::copy(source, source + size, images + i * size);
        labels[i] = dataset.labels(indices[i]);
    }
}

} // namespace petra
