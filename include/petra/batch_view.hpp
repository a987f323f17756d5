// batch_view<T, Shape> (floor 2): a batch of examples of one compile-time
// shape, in memory the view does not own. The shape is in the type, the batch
// size is a run-time value, and so is nothing else: a view is a pointer and a
// count. Whether the values may be written is in the type too:
// batch_view<const float, S> reads, batch_view<float, S> writes, and a
// writable view converts to a read-only one, never the other way.
//
//   float images[64 * 784];
//   batch_view<const float, shape<1, 28, 28>> x(images, 64);   // x.size() == 64 * 784
//
// Layers, blocks, stages and trainers take their batches as views, so that a
// call cannot swap an input for an output or a batch of one shape for
// another. Kernels (floor 1) keep pointers and counts.
//
// A view of a pair of halves (halves<shape<C, H, W>>, stored half-major, see
// shape.hpp) gives each half as a view of its own: first_half(),
// second_half(). A default-constructed view refers to no memory; it stands
// for an output the caller does not want (a gradient that is not needed) and
// converts to false.
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <type_traits>

#include <petra/shape.hpp>

namespace petra {

template <class T, class Shape>
class batch_view {
    static_assert(an_example_shape<Shape>, "A batch_view is of a shape<C, H, W> or of halves<shape<C, H, W>>.");
    static_assert(std::is_floating_point_v<std::remove_const_t<T>>, "A batch_view holds float or double values.");

public:
    using element_type = T;
    using value_type = std::remove_const_t<T>;
    using shape_type = Shape;
    // Values of one example.
    static constexpr std::size_t example_size = Shape::size;

    constexpr batch_view() noexcept = default;
    // batch examples of Shape from data: batch * Shape::size values.
    constexpr batch_view(T* data, std::size_t batch) noexcept : data_(data), batch_(batch) {}
    // A read-only view of the same values.
    template <class Mutable>
        requires std::is_const_v<T> && std::is_same_v<const Mutable, T>
    constexpr batch_view(batch_view<Mutable, Shape> values) noexcept : data_(values.data()), batch_(values.batch()) {}

    constexpr T* data() const noexcept { return data_; }
    constexpr std::size_t batch() const noexcept { return batch_; }
    // Values in the view: batch() * Shape::size.
    constexpr std::size_t size() const noexcept { return batch_ * Shape::size; }
    constexpr std::span<T> values() const noexcept { return {data_, size()}; }
    constexpr T* begin() const noexcept { return data_; }
    constexpr T* end() const noexcept { return data_ + size(); }
    // Whether the view refers to memory (an output the caller wants).
    constexpr explicit operator bool() const noexcept { return data_ != nullptr; }

    // The same values as a batch of another shape of as many values per
    // example (a flattening, or a pair of halves seen as one shape).
    template <class Other>
    constexpr batch_view<T, Other> as() const noexcept
    {
        static_assert(Other::size == Shape::size, "A batch can only be seen as a shape of as many values.");
        return {data_, batch_};
    }

    // The first (x) and second (x~) half of every example, when Shape is a
    // pair of halves.
    constexpr auto first_half() const noexcept requires is_halves<Shape>::value
    {
        return batch_view<T, typename Shape::half>(data_, batch_);
    }
    constexpr auto second_half() const noexcept requires is_halves<Shape>::value
    {
        return batch_view<T, typename Shape::half>(data_ ? data_ + batch_ * Shape::half::size : nullptr, batch_);
    }

private:
    T* data_ = nullptr;
    std::size_t batch_ = 0;
};

// A read-only view as a function parameter that takes part in no template
// argument deduction: a function templated on the value type T deduces T from
// its other arguments and accepts here a view of T or of const T alike.
template <class T, class Shape>
using const_batch = std::type_identity_t<batch_view<const T, Shape>>;

// Copies the values of one batch into another of the same shape and size.
template <class T, class Shape>
void copy_batch(const_batch<T, Shape> from, batch_view<T, Shape> to)
{
    std::copy_n(from.data(), from.size(), to.data());
}

// copy_batch, but nothing where `to` is `from` itself (a buffer laid out so
// that the two share their values: boundary_layout.hpp). Any other overlap is
// the caller's error, as for copy_batch.
template <class T, class Shape>
void copy_unless_shared(const_batch<T, Shape> from, batch_view<T, Shape> to)
{
    if (from.data() != to.data()) copy_batch<T>(from, to);
}

} // namespace petra
