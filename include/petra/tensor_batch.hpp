// Tensors from the caller as batches (floor 2): an xtensor container, an
// xt::adapt view of the caller's memory, or any contiguous tensor that
// offers data(), shape() and strides(), seen as a batch_view of a network's
// shape without a copy. The first dimension is the batch; the others must be
// the shape's channels, height and width (trailing ones may be left out on
// either side: logits of shape<10> are a tensor of N x 10). A tensor of
// another shape, or one whose values are not contiguous in row-major order,
// is refused with a message that names both shapes:
//
//   xt::xtensor<float, 4> images = ...;                 // 64 x 1 x 28 x 28
//   auto x = as_batch<shape<1, 28, 28>>(images, "predict: images");
//   // x is a batch_view<float, shape<1, 28, 28>> of 64 examples
//
// This header names no tensor library: any type with those members fits, so
// the floors that take tensors need not include one.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <petra/batch_view.hpp>
#include <petra/error.hpp>
#include <petra/shape.hpp>

namespace petra {

// A tensor whose values are reachable from data() and laid out by shape()
// and strides() (counted in values).
template <class E>
concept tensor_like = requires(E& tensor)
{
    tensor.data();
    requires std::convertible_to<decltype(tensor.shape().size()), std::size_t>;
    requires std::convertible_to<decltype(tensor.strides().size()), std::size_t>;
    requires std::is_pointer_v<decltype(tensor.data())>;
};

namespace detail {

// "(64, 1, 28, 28)"; the batch as N when not known.
inline std::string dimensions_text(const std::vector<std::size_t>& dimensions, bool batch_known)
{
    std::string text = "(";
    for (std::size_t i = 0; i < dimensions.size(); ++i) {
        if (i > 0) text += ", ";
        text += i == 0 && !batch_known ? std::string("N") : std::to_string(dimensions[i]);
    }
    return text + ")";
}

template <class E>
std::vector<std::size_t> dimensions_of(const E& tensor)
{
    std::vector<std::size_t> dimensions;
    for (auto extent : tensor.shape()) dimensions.push_back(static_cast<std::size_t>(extent));
    return dimensions;
}

// The per-example dimensions of a shape, trailing ones dropped, after the
// batch (for the message: N first).
template <class Shape>
std::vector<std::size_t> expected_dimensions()
{
    std::vector<std::size_t> dimensions{0};
    if constexpr (is_halves<Shape>::value) {
        dimensions.push_back(Shape::size);
    } else {
        dimensions.insert(dimensions.end(), {Shape::channels, Shape::height, Shape::width});
    }
    while (dimensions.size() > 2 && dimensions.back() == 1) dimensions.pop_back();
    return dimensions;
}

template <class E>
void check_contiguous(const E& tensor, const std::vector<std::size_t>& dimensions, const std::string& what)
{
    std::size_t expected = 1;
    for (std::size_t d = dimensions.size(); d-- > 0;) {
        // A dimension of one may have any stride: it is never stepped.
        if (dimensions[d] > 1 && static_cast<std::size_t>(tensor.strides()[d]) != expected) {
            raise_error(error_kind::invalid_argument, what + ": the tensor's values are not contiguous in row-major "
                                                             "order; pass a container or an adapted contiguous array.");
        }
        expected *= dimensions[d];
    }
}

// Where the tensor's first value is: a view into a larger tensor (one that
// says so with data_offset()) starts past data().
template <class E>
auto first_value(E& tensor)
{
    if constexpr (requires { tensor.data_offset(); }) {
        return tensor.data() + tensor.data_offset();
    } else {
        return tensor.data();
    }
}

} // namespace detail

// The tensor as a batch of Shape (see the top of the file); `what` begins
// the message of a refusal ("predict: images"). The view is writable when
// the tensor is, read-only when it is const.
template <class Shape, tensor_like E>
auto as_batch(E& tensor, const std::string& what)
{
    using element = std::remove_pointer_t<decltype(tensor.data())>;
    std::vector<std::size_t> dimensions = detail::dimensions_of(tensor);
    const std::vector<std::size_t> expected = detail::expected_dimensions<Shape>();
    std::vector<std::size_t> given = dimensions;
    while (given.size() > 2 && given.back() == 1) given.pop_back();
    const bool fits = !given.empty() && given.size() == expected.size() &&
                      std::equal(given.begin() + 1, given.end(), expected.begin() + 1);
    if (!fits) {
        raise_error(error_kind::invalid_argument,
                    what + ": a tensor of shape " + detail::dimensions_text(dimensions, true) + "; the network takes " +
                        detail::dimensions_text(expected, false) + ".");
    }
    detail::check_contiguous(tensor, dimensions, what);
    return batch_view<element, Shape>(detail::first_value(tensor), dimensions[0]);
}

// Where labels may come from next to a tensor of images: a tensor of
// std::int32_t, or anything a span of them is made from (a std::vector, an
// array).
template <class Labels>
concept label_source = tensor_like<const Labels> || std::convertible_to<const Labels&, std::span<const std::int32_t>>;

// A one-dimensional tensor of class labels (std::int32_t), or a contiguous
// range of them, as a span, which must hold one label per example of a
// batch of `batch`.
template <label_source E>
std::span<const std::int32_t> as_labels(const E& labels, std::size_t batch, const std::string& what)
{
    if constexpr (!tensor_like<const E>) {
        const std::span<const std::int32_t> values(labels);
        if (values.size() != batch) {
            raise_error(error_kind::invalid_argument, what + ": " + std::to_string(values.size()) +
                                                          " labels for a batch of " + std::to_string(batch) +
                                                          " images; one label each.");
        }
        return values;
    } else {
        static_assert(std::is_same_v<std::remove_cv_t<std::remove_pointer_t<decltype(labels.data())>>, std::int32_t>,
                      "Labels are a tensor of std::int32_t class indices.");
        const std::vector<std::size_t> dimensions = detail::dimensions_of(labels);
        if (dimensions.size() != 1 || dimensions[0] != batch) {
            raise_error(error_kind::invalid_argument,
                        what + ": labels of shape " + detail::dimensions_text(dimensions, true) + " for a batch of " +
                            std::to_string(batch) + " images; one label each.");
        }
        detail::check_contiguous(labels, dimensions, what);
        return {detail::first_value(labels), batch};
    }
}

} // namespace petra
