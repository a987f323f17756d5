// owned_batch<T, Shape> (floor 2): a batch of examples of one compile-time
// shape in memory of its own, aligned as the kernels' buffers are
// (kernels::aligned_vector), zero-initialised. It is to batch_view what
// std::string is to std::string_view: it converts to a writable
// batch_view<T, Shape> and to a read-only const_batch<T, Shape>, so that it
// is passed as it is wherever a view is taken (predict, the trainers, a
// pipeline's feed), with no cast and no wrapping:
//
//   owned_batch<float, net::input> images(64);     // images.size() == 64 * net::input::size
//   std::vector<std::int32_t> labels(64);
//   read_micro_batch(m, images.values(), labels);  // the caller's data
//   pipeline.feed(images, labels);                 // 64 labels, one per image
//   predict(parameters, images, logits);           // logits: an owned_batch<float, net::output>(64)
//
// A function template that deduces T from a writable view (a block's
// forward, its output y) takes view(): a conversion takes no part in the
// deduction. Labels stay a std::vector<std::int32_t> (or any range a
// std::span<const std::int32_t> is made from): what takes images and labels
// checks that there is one label per image.
//
// A view taken from an owned_batch refers to its memory: it is valid while
// the owned_batch holding that memory lives (a move hands the memory on).
// The type is not called `batch`: that is the batch size's name, as a
// variable everywhere and as batch() here and in batch_view.
#pragma once

#include <cstddef>
#include <span>
#include <type_traits>

#include <petra/batch_view.hpp>
#include <petra/kernels/simd.hpp>
#include <petra/shape.hpp>

namespace petra {

template <class T, class Shape>
class owned_batch {
    static_assert(an_example_shape<Shape>, "An owned_batch is of a shape<C, H, W> or of halves<shape<C, H, W>>.");
    static_assert(std::is_floating_point_v<T>, "An owned_batch holds float or double values.");

public:
    using value_type = T;
    using shape_type = Shape;
    // Values of one example.
    static constexpr std::size_t example_size = Shape::size;

    // No examples.
    owned_batch() = default;
    // batch examples of Shape, every value zero.
    explicit owned_batch(std::size_t batch) : values_(batch * Shape::size), batch_(batch) {}

    T* data() noexcept { return values_.data(); }
    const T* data() const noexcept { return values_.data(); }
    std::size_t batch() const noexcept { return batch_; }
    // Values held: batch() * Shape::size.
    std::size_t size() const noexcept { return values_.size(); }
    std::span<T> values() noexcept { return values_; }
    std::span<const T> values() const noexcept { return values_; }
    T* begin() noexcept { return values_.data(); }
    T* end() noexcept { return values_.data() + values_.size(); }
    const T* begin() const noexcept { return values_.data(); }
    const T* end() const noexcept { return values_.data() + values_.size(); }

    // The values as a view: writable from a batch that may be written,
    // read-only from a const one.
    batch_view<T, Shape> view() noexcept { return {values_.data(), batch_}; }
    batch_view<const T, Shape> view() const noexcept { return {values_.data(), batch_}; }
    operator batch_view<T, Shape>() noexcept { return view(); }
    operator batch_view<const T, Shape>() const noexcept { return view(); }

private:
    kernels::aligned_vector<T> values_;
    std::size_t batch_ = 0;
};

} // namespace petra
