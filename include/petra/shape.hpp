// Compile-time tensor shapes (floor 2): channels, height and width of one
// example. The batch size is a run-time value everywhere; a tensor of a batch
// is stored NCHW, example after example.
//
// Between the blocks of a reversible network the state is a pair of halves
// (x, x~) of one shape, halves<shape<C, H, W>>. A batch of it is stored
// half-major: the first half of every example (an ordinary NCHW batch), then
// the second half of every example, so that a layer runs on either half as an
// ordinary batch.
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

template <class Half>
struct halves {
    static_assert(a_shape<Half>, "halves are made of a shape<C, H, W>.");
    using half = Half;
    // Values of one example: both halves.
    static constexpr std::size_t size = 2 * Half::size;
};

template <class T>
struct is_halves : std::false_type {};
template <class Half>
struct is_halves<halves<Half>> : std::true_type {};

// What a batch can be made of: a shape, or a pair of halves of one.
template <class T>
concept an_example_shape = a_shape<T> || is_halves<T>::value;

} // namespace petra
