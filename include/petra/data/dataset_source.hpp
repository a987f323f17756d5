// A labelled_images dataset (Fashion-MNIST, or any IDX set) as the training
// loop's data source (train/data_source.hpp): each epoch visits it in the
// order batch_order draws from (seed, epoch), in full micro-batches, and
// augments them when asked, with a generator seeded at each epoch's start
// from (seed, epoch) and saved in the checkpoint, so that a resumed run
// draws what an uninterrupted one draws.
//
//   auto train = load_idx_dataset(..., 10, fashion_mnist_normalisation);
//   dataset_source<net::input> data(train, train.size(), /*batch=*/64, /*seed=*/1,
//                                   augmentation{.padding = 2, .flip = true});
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <petra/batch_view.hpp>
#include <petra/data/augmentation.hpp>
#include <petra/data/dataset.hpp>
#include <petra/state_archive.hpp>
#include <petra/train/data_source.hpp>

namespace petra {

template <class Input>
class dataset_source {
public:
    // size: the dataset's size, also where data is empty (a process that
    // reads no data, such as an MPI rank that does not feed: it knows the
    // size and never calls batch()). Throws std::invalid_argument for a
    // batch of 0 or larger than the dataset.
    dataset_source(const labelled_images& data, std::size_t size, std::size_t batch, std::uint64_t seed,
                   augmentation settings = {})
        : data_(data), order_(size, batch, seed), seed_(seed), settings_(settings)
    {}

    std::size_t batch_size() const { return order_.batch_size(); }
    std::size_t batches_per_epoch() const { return order_.batches(); }

    // The seed of epoch `epoch`'s augmentation generator.
    static std::uint64_t augmentation_seed(std::uint64_t seed, std::size_t epoch) { return seed * 1000003 + epoch; }

    void batch(std::size_t epoch, std::size_t index, batch_view<float, Input> images, std::span<std::int32_t> labels)
    {
        if (data_.size() == 0) throw std::logic_error("dataset_source: this process holds no training data.");
        if (epoch != ordered_epoch_) {
            order_.shuffle(epoch);
            ordered_epoch_ = epoch;
        }
        if (index == 0) generator_.seed(augmentation_seed(seed_, epoch));
        gather_batch(data_, order_.batch(index), images.data(), labels.data());
        augment_batch(images.data(), images.batch(), Input::channels, Input::height, Input::width, settings_,
                      generator_, scratch_);
    }

    // The augmentation generator's state.
    template <state_archive Archive>
    void transfer_state(Archive& archive)
    {
        archive.section("dataset source");
        std::string state;
        if constexpr (!Archive::loading) {
            std::ostringstream text;
            text << generator_;
            state = text.str();
        }
        archive.text(state);
        if constexpr (Archive::loading) {
            std::istringstream text(state);
            text >> generator_;
            if (!text) throw std::runtime_error("dataset_source: the augmentation generator's state cannot be read.");
        }
    }

private:
    const labelled_images& data_;
    batch_order order_;
    std::uint64_t seed_;
    augmentation settings_;
    std::mt19937_64 generator_;
    std::vector<float> scratch_;
    std::size_t ordered_epoch_ = std::size_t(-1);
};

} // namespace petra
