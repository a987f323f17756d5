// Data augmentation on a batch of images in place (floor 9): each image is
// shifted by a random crop of its padded copy and flipped left-right
// with probability one half, the classic augmentation of small image
// datasets. Which shift and flip an image gets is drawn from the generator
// the caller passes, so that a run is reproducible from its seed.
#pragma once

#if !(defined(__cpp_exceptions) || defined(__EXCEPTIONS))
#error "petra: data/augmentation.hpp needs exceptions: it reports its errors with them only (see error.hpp)."
#endif

#include <algorithm>
#include <cstddef>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <petra/random.hpp>
#include <petra/tensor_batch.hpp>

namespace petra {

struct augmentation {
    std::size_t padding = 0; // crop a H x W window of the image padded by this many pixels each side
    bool flip = false;       // mirror left-right with probability 1/2
    float fill = 0.0f;       // the padding's value: a black pixel as normalised (e.g. -mean / deviation)
};

// images: batch x channels x height x width values, NCHW. Allocates nothing
// once scratch (height x width values) is large enough.
inline void augment_batch(float* images, std::size_t batch, std::size_t channels, std::size_t height, std::size_t width,
                          const augmentation& settings, std::mt19937_64& generator, std::vector<float>& scratch)
{
    if (settings.padding == 0 && !settings.flip) return;
    scratch.resize(height * width);
    const auto padding = static_cast<std::ptrdiff_t>(settings.padding);
    // Per image, in this order (random.hpp's samplers): dy, then dx, each
    // uniform_int(-padding, padding), then, only when flipping is on, one coin.
    for (std::size_t n = 0; n < batch; ++n) {
        const std::ptrdiff_t dy = uniform_int(generator, -padding, padding);
        const std::ptrdiff_t dx = uniform_int(generator, -padding, padding);
        const bool flip = settings.flip && coin(generator);
        for (std::size_t c = 0; c < channels; ++c) {
            float* plane = images + (n * channels + c) * height * width;
            std::copy(plane, plane + height * width, scratch.begin());
            for (std::size_t y = 0; y < height; ++y) {
                for (std::size_t x = 0; x < width; ++x) {
                    // Output (y, x) shows input (y + dy, x' + dx), x' mirrored when flipping.
                    const std::ptrdiff_t source_x = std::ptrdiff_t(flip ? width - 1 - x : x) + dx;
                    const std::ptrdiff_t source_y = std::ptrdiff_t(y) + dy;
                    const bool inside = source_y >= 0 && source_y < std::ptrdiff_t(height) && source_x >= 0 &&
                                        source_x < std::ptrdiff_t(width);
                    plane[y * width + x] =
                        inside ? scratch[std::size_t(source_y) * width + std::size_t(source_x)] : settings.fill;
                }
            }
        }
    }
}

// The same on a tensor of images in place (N x C x H x W: an xtensor
// container or an xt::adapt view of the caller's memory, contiguous).
template <tensor_like Images>
void augment_batch(Images& images, const augmentation& settings, std::mt19937_64& generator,
                   std::vector<float>& scratch)
{
    static_assert(std::is_same_v<std::remove_pointer_t<decltype(images.data())>, float>,
                  "augment_batch changes a tensor of float images in place.");
    const std::vector<std::size_t> dimensions = detail::dimensions_of(images);
    if (dimensions.size() != 4) {
        throw std::invalid_argument("augment_batch: images must be a tensor of N x C x H x W, not of shape " +
                                    detail::dimensions_text(dimensions, true) + ".");
    }
    detail::check_contiguous(images, dimensions, "augment_batch: images");
    augment_batch(detail::first_value(images), dimensions[0], dimensions[1], dimensions[2], dimensions[3], settings,
                  generator, scratch);
}

} // namespace petra
