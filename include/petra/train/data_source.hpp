// What the training loop reads its micro-batches from (floor 8): a data
// source. A type is one when it says its micro-batch size and how many
// micro-batches an epoch has, and writes micro-batch `index` of epoch
// `epoch` into the caller's views:
//
//   struct my_data {
//       std::size_t batch_size() const { return 32; }
//       std::size_t batches_per_epoch() const { return 100; }
//       void batch(std::size_t epoch, std::size_t index, petra::batch_view<float, net::input> images,
//                  std::span<std::int32_t> labels);   // fills batch_size() images and labels
//   };
//   static_assert(petra::data_source<my_data, net::input>);
//
// The loop asks for the micro-batches of an epoch in order, from 0, or from
// where a resumed run stopped: what batch(epoch, index) writes must depend
// on (epoch, index) alone, or on state the source saves in the checkpoint
// (an optional transfer_state(archive), e.g. an augmentation generator). It
// must not allocate (the loop allocates nothing per micro-batch).
//
// tensor_source, below, serves examples held in memory; the data floor's
// dataset_source (data/dataset_source.hpp) serves a labelled_images
// dataset such as Fashion-MNIST, shuffled and augmented.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <petra/batch_view.hpp>
#include <petra/error.hpp>
#include <petra/random.hpp>

namespace petra {

template <class Source, class Input>
concept data_source = requires(Source& source, const Source& view, std::size_t epoch, std::size_t index,
                               batch_view<float, Input> images, std::span<std::int32_t> labels)
{
    requires std::convertible_to<decltype(view.batch_size()), std::size_t>;
    requires std::convertible_to<decltype(view.batches_per_epoch()), std::size_t>;
    source.batch(epoch, index, images, labels);
};

// Examples of shape Input held by the caller (count * Input::size values,
// NCHW, and count labels), cut into micro-batches of `batch`: in order, or,
// with a seed other than 0, in an order drawn afresh for each epoch from
// (seed, epoch). The last count % batch examples of an epoch's order are
// left out. The caller's memory must outlive the source.
template <class Input>
class tensor_source {
public:
    // Raises invalid_argument when the values are not one image per label,
    // or the batch is 0 or larger than the examples.
    tensor_source(std::span<const float> images, std::span<const std::int32_t> labels, std::size_t batch,
                  std::uint64_t seed = 0)
        : images_(images), labels_(labels), batch_(batch), seed_(seed), order_(labels.size())
    {
        if (images.size() != labels.size() * Input::size) {
            raise_error(error_kind::invalid_argument, "tensor_source: " + std::to_string(images.size()) +
                                                          " values are not " + std::to_string(labels.size()) +
                                                          " images of " + std::to_string(Input::size) + ".");
        }
        if (batch == 0 || batch > labels.size()) {
            raise_error(error_kind::invalid_argument, "tensor_source: a micro-batch of " + std::to_string(batch) +
                                                          " examples does not fit " + std::to_string(labels.size()) +
                                                          " examples.");
        }
        std::iota(order_.begin(), order_.end(), std::size_t{0});
    }

    std::size_t batch_size() const { return batch_; }
    std::size_t batches_per_epoch() const { return labels_.size() / batch_; }

    void batch(std::size_t epoch, std::size_t index, batch_view<float, Input> images, std::span<std::int32_t> labels)
    {
        if (seed_ != 0 && epoch != ordered_epoch_) order_epoch(epoch);
        for (std::size_t n = 0; n < batch_; ++n) {
            const std::size_t example = order_[index * batch_ + n];
            std::copy_n(images_.data() + example * Input::size, Input::size, images.data() + n * Input::size);
            labels[n] = labels_[example];
        }
    }

private:
    // The permutation of `epoch`, drawn from the identity: it depends on
    // (seed, epoch) only.
    void order_epoch(std::size_t epoch)
    {
        std::iota(order_.begin(), order_.end(), std::size_t{0});
        std::mt19937_64 generator(seed_ ^ (0x9e3779b97f4a7c15ull * (epoch + 1)));
        petra::shuffle(order_.begin(), order_.end(), generator); // random.hpp: the same order on every library
        ordered_epoch_ = epoch;
    }

    std::span<const float> images_;
    std::span<const std::int32_t> labels_;
    std::size_t batch_;
    std::uint64_t seed_;
    std::vector<std::size_t> order_;
    std::size_t ordered_epoch_ = std::size_t(-1);
};

} // namespace petra
