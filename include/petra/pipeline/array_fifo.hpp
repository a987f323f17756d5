// The FIFO a pipeline stage keeps inputs and stashed parameters in (floor
// 7): a ring of `depth` arrays of `size` values, allocated once, pushed and
// popped in order. A push onto a full ring or a pop from an empty one means
// the schedule is broken: std::logic_error. A checkpoint that would put more
// arrays in the ring than it holds is refused: std::runtime_error.
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include <petra/error.hpp>
#include <petra/kernels/simd.hpp>
#include <petra/state_archive.hpp>

namespace petra {

template <class T>
class array_fifo {
public:
    array_fifo() = default;
    array_fifo(std::size_t depth, std::size_t size) : values_(depth * size), depth_(depth), size_(size) {}

    T* push()
    {
        if (count_ == depth_) {
            raise_error(error_kind::logic_error, "pipeline stage: a FIFO overflowed; the schedule is broken.");
        }
        T* slot = values_.data() + ((first_ + count_) % depth_) * size_;
        ++count_;
        return slot;
    }
    // The oldest array; valid until the next push.
    T* pop()
    {
        if (count_ == 0) {
            raise_error(error_kind::logic_error, "pipeline stage: a FIFO underflowed; the schedule is broken.");
        }
        T* slot = values_.data() + first_ * size_;
        first_ = (first_ + 1) % depth_;
        --count_;
        return slot;
    }
    std::size_t count() const { return count_; }
    std::size_t memory_bytes() const { return values_.size() * sizeof(T); }

    // The `count` arrays held (the caller knows how many), oldest first;
    // read back, they refill the ring from its start.
    template <state_archive Archive>
    void transfer_state(Archive& archive, std::size_t count)
    {
        archive.expect(size_, "values per FIFO entry");
        if constexpr (Archive::loading) {
            if (count > depth_) {
                raise_error(error_kind::runtime_error, "pipeline checkpoint: a FIFO of " + std::to_string(depth_) +
                                                           " arrays cannot hold " + std::to_string(count) +
                                                           "; the checkpoint is inconsistent.");
            }
            first_ = 0;
            count_ = count;
        } else if (count != count_) {
            raise_error(error_kind::logic_error, "pipeline stage: a FIFO holds " + std::to_string(count_) +
                                                     " arrays, not " + std::to_string(count) + ".");
        }
        for (std::size_t i = 0; i < count_; ++i) {
            archive.values(std::span<T>(values_.data() + ((first_ + i) % depth_) * size_, size_));
        }
    }

private:
    kernels::aligned_vector<T> values_;
    std::size_t depth_ = 0;
    std::size_t size_ = 0;
    std::size_t first_ = 0;
    std::size_t count_ = 0;
};

} // namespace petra
