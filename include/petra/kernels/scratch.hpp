// Where a kernel call takes its scratch: the buffers it needs only while it
// runs (an input copied with its zero border, packed weights, a transposed
// gradient, tap offsets).
//
// Two sources, chosen by the caller of a kernel that takes a trailing
// `std::span<std::byte> scratch` argument:
// - empty (the default): per-thread buffers (thread_scratch in simd.hpp),
//   one per kind of buffer, grown to the largest request and then reused.
//   Training uses these; its steady state allocates nothing.
// - a caller's region of bytes, starting on a buffer_alignment (64-byte)
//   boundary: the kernel carves its buffers from the region in order, each
//   rounded up to whole cache lines, and allocates nothing. The region must
//   hold the call's demand (below), region_bytes(); a smaller one is an
//   std::invalid_argument (error.hpp).
//
// What a computation asks of scratch is a constexpr value, scratch_demand,
// stated next to each kernel (gemm_scratch, convolution_forward_scratch,
// ...) from the same counts the kernel takes. Computations that run one
// after another on one thread merge their demands:
//   region_bytes(): the most one of them needs of a caller's region;
//   thread_bytes(): what the per-thread buffers hold once all have run (per
//       buffer the largest request, summed over the buffers).
//
//   constexpr convolution_shape shape{64, 16, 28, 28, 16, 3, 1, 1};
//   alignas(64) static std::byte region[convolution_forward_scratch<float>(shape).region_bytes()];
//   convolution_forward(shape, input, weights, output, region);   // allocates nothing
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include <petra/error.hpp>
#include <petra/kernels/simd.hpp>

namespace petra::kernels {

// Bytes a buffer of count values of T takes in a region: whole cache lines,
// so that the next buffer starts aligned too.
template <class T>
constexpr std::size_t region_bytes_of(std::size_t count)
{
    return (count * sizeof(T) + buffer_alignment - 1) / buffer_alignment * buffer_alignment;
}

namespace detail {
// A fingerprint of Tag and T: FNV-1a of this function's name, which the
// compiler spells with both types in it. (A number rather than an address:
// compilers do not agree that comparing the addresses of two variables is a
// constant expression, and sanitizer builds refuse it.)
template <class Tag, class T>
constexpr std::uint64_t type_pair_fingerprint()
{
    std::uint64_t hash = 14695981039346656037ull;
    for (const char c : std::string_view(__PRETTY_FUNCTION__)) {
        hash ^= static_cast<unsigned char>(c);
        hash *= 1099511628211ull;
    }
    return hash;
}
} // namespace detail

// The identity of one per-thread buffer: thread_scratch<Tag, T> keeps one
// buffer per Tag and T, and scratch_key<Tag, T> names it in a demand.
template <class Tag, class T>
inline constexpr std::uint64_t scratch_key = detail::type_pair_fingerprint<Tag, T>();

namespace detail {
// Called only where a demand outgrows its capacity: not constexpr, so a
// demand computed at compile time stops the build there.
inline void scratch_demand_overflow()
{
    raise_error(error_kind::logic_error, "petra::kernels: a scratch_demand has more buffers than its capacity.");
}
} // namespace detail

class scratch_demand {
public:
    // Buffers a demand can name; a reference network's whole pipeline names
    // about twenty.
    static constexpr std::size_t capacity = 64;

    // One request of count values of T from the buffer (Tag, T).
    template <class Tag, class T>
    constexpr scratch_demand& ask(std::size_t count)
    {
        const std::size_t bytes = count * sizeof(T);
        region_ += region_bytes_of<T>(count);
        keep_largest(scratch_key<Tag, T>, bytes);
        return *this;
    }

    // This demand and `other` running one after the other on one thread.
    constexpr scratch_demand& merge(const scratch_demand& other)
    {
        region_ = std::max(region_, other.region_);
        for (std::size_t i = 0; i < other.count_; ++i) keep_largest(other.buffers_[i].key, other.buffers_[i].bytes);
        return *this;
    }

    // Bytes of a caller's region that the most demanding computation needs.
    constexpr std::size_t region_bytes() const { return region_; }
    // Bytes the per-thread buffers hold once every computation has run.
    constexpr std::size_t thread_bytes() const
    {
        std::size_t total = 0;
        for (std::size_t i = 0; i < count_; ++i) total += buffers_[i].bytes;
        return total;
    }
    // Distinct per-thread buffers named.
    constexpr std::size_t buffer_count() const { return count_; }
    // visit(key, bytes) for each buffer named, in the order first named (a
    // planner merging demands it only knows as numbers merges them this
    // way: per key the largest).
    template <class Visit>
    constexpr void for_each_buffer(Visit&& visit) const
    {
        for (std::size_t i = 0; i < count_; ++i) visit(buffers_[i].key, buffers_[i].bytes);
    }

private:
    struct buffer {
        std::uint64_t key = 0;
        std::size_t bytes = 0;
    };

    constexpr void keep_largest(std::uint64_t key, std::size_t bytes)
    {
        for (std::size_t i = 0; i < count_; ++i) {
            if (buffers_[i].key == key) {
                buffers_[i].bytes = std::max(buffers_[i].bytes, bytes);
                return;
            }
        }
        if (count_ == capacity) detail::scratch_demand_overflow();
        buffers_[count_++] = {key, bytes};
    }

    std::array<buffer, capacity> buffers_{};
    std::size_t count_ = 0;
    std::size_t region_ = 0;
};

// What one kernel call takes its scratch from: per-thread buffers (default)
// or a caller's region, carved in order. Passed by reference down a call, so
// that every buffer of the call gets memory of its own.
class scratch_source {
public:
    scratch_source() = default;
    // An empty region means per-thread buffers.
    explicit scratch_source(std::span<std::byte> region)
        : next_(region.empty() ? nullptr : region.data()), end_(next_ == nullptr ? nullptr : next_ + region.size())
    {
        if (next_ != nullptr && reinterpret_cast<std::uintptr_t>(next_) % buffer_alignment != 0) {
            raise_error(error_kind::invalid_argument,
                        "petra::kernels: a scratch region must start on a 64-byte boundary.");
        }
    }

    // count values of T, aligned to buffer_alignment, valid until the call
    // ends (a region) or the next request of the same buffer on this thread
    // (per-thread buffers).
    template <class Tag, class T>
    T* take(std::size_t count)
    {
        if (next_ == nullptr) return thread_scratch<Tag, T>(count);
        const std::size_t bytes = region_bytes_of<T>(count);
        if (static_cast<std::size_t>(end_ - next_) < bytes) {
            raise_error(error_kind::invalid_argument,
                        "petra::kernels: the scratch region is too small for this call; it must hold the "
                        "region_bytes() of the kernel's scratch demand.");
        }
        T* values = reinterpret_cast<T*>(next_);
        next_ += bytes;
        return values;
    }

private:
    std::byte* next_ = nullptr;
    std::byte* end_ = nullptr;
};

} // namespace petra::kernels
