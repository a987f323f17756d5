// Compile-time tensor shapes: channels, height and width of one example. The
// batch size is a run-time value everywhere; a tensor of a batch is stored
// NCHW, example after example.
#pragma once

#include <cstddef>
#include <type_traits>

namespace petra {

template <std::size_t Channels, std::size_t Height = 1, std::size_t Width = 1>
struct shape {
    static_assert(Channels > 0 && Height > 0 && Width > 0, "A shape needs at least one channel, row and column.");
    static constexpr std::size_t channels = Channels;
    static constexpr std::size_t height = Height;
    static constexpr std::size_t width = Width;
    static constexpr std::size_t pixels = Height * Width;
    // Values of one example.
    static constexpr std::size_t size = Channels * Height * Width;
};

template <class T>
struct is_shape : std::false_type {};
template <std::size_t C, std::size_t H, std::size_t W>
struct is_shape<shape<C, H, W>> : std::true_type {};

template <class T>
concept a_shape = is_shape<T>::value;

} // namespace petra
