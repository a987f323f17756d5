// Channels between pipeline stages (floor 7): bounded single-producer
// single-consumer queues of fixed-size messages, allocated once.
//
// A message is a header (which micro-batch, or the end of an epoch) and a
// payload of values. Sender and receiver work in place in the channel's
// slots, so nothing is copied in transit and nothing is allocated per
// message:
//
//   message<T> out = channel.begin_send();   // waits for a free slot
//   ... write out.values[0 .. out.size) and out.header ...
//   channel.end_send();
//   message<T> in = channel.begin_receive(); // waits for a message
//   ... read in.values ...
//   channel.end_receive();
//
// The transport concept below is what a stage's worker needs of a channel,
// so that another transport (MPI between ranks) can take this one's place.
//
// Waiting: a blocking channel waits on a condition variable; a stop signal
// shared by all channels of a pipeline wakes every waiter, which then throws
// pipeline_stopped (how an error in one stage stops all the others; without
// exceptions an error ends the program in the error handler, and a waiter
// waits for its message, see thread_pipeline.hpp). A non-blocking channel
// (the sequential simulator's) never waits: finding it full or empty is a
// scheduling error, std::logic_error (error.hpp).
#pragma once

#include <atomic>
#include <concepts>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include <petra/error.hpp>
#include <petra/kernels/simd.hpp>
#include <petra/state_archive.hpp>

namespace petra {

struct message_header {
    std::size_t micro_batch = 0;
    bool end_of_epoch = false;
};

template <class T>
struct message {
    message_header* header;
    T* values;
    std::size_t size;
};

// Thrown inside a stage whose pipeline was stopped while it waited.
struct pipeline_stopped : std::exception {
    const char* what() const noexcept override { return "the pipeline was stopped"; }
};

template <class C, class T>
concept transport = requires(C& channel)
{
    requires std::same_as<decltype(channel.begin_send()), message<T>>;
    channel.end_send();
    requires std::same_as<decltype(channel.begin_receive()), message<T>>;
    channel.end_receive();
};

class channel_base;

// How a channel that cannot go on yet behaves: wait for the other side, or
// (the sequential simulator) report a scheduling error.
enum class channel_waiting { blocking, never };

// Shared by the channels of one pipeline: once stopped, every wait on any of
// them ends with pipeline_stopped.
class stop_signal {
public:
    bool stopped() const { return stopped_.load(std::memory_order_acquire); }
    void watch(channel_base* channel) { channels_.push_back(channel); }
    inline void stop();

private:
    std::atomic<bool> stopped_{false};
    std::vector<channel_base*> channels_;
};

class channel_base {
public:
    void wake()
    {
        std::lock_guard lock(mutex_);
        changed_.notify_all();
    }

protected:
    std::mutex mutex_;
    std::condition_variable changed_;
};

inline void stop_signal::stop()
{
    stopped_.store(true, std::memory_order_release);
    for (channel_base* channel : channels_) channel->wake();
}

template <class T>
class channel : public channel_base {
public:
    // capacity messages of message_size values each, allocated now.
    channel(std::string name, std::size_t capacity, std::size_t message_size, stop_signal& stop,
            channel_waiting mode = channel_waiting::blocking)
        : name_(std::move(name)), capacity_(capacity), message_size_(message_size), values_(capacity * message_size),
          headers_(capacity), stop_(stop), mode_(mode)
    {
        if (capacity == 0) {
            raise_error(error_kind::invalid_argument, "channel '" + name_ + "': a capacity of at least 1 is needed.");
        }
        stop.watch(this);
    }
    channel(const channel&) = delete;
    channel& operator=(const channel&) = delete;

    message<T> begin_send()
    {
        std::unique_lock lock(mutex_);
        wait(
            lock, [&] { return sent_ - received_ < capacity_; }, "full");
        const std::size_t slot = sent_ % capacity_;
        return {&headers_[slot], values_.data() + slot * message_size_, message_size_};
    }
    void end_send()
    {
        {
            std::lock_guard lock(mutex_);
            ++sent_;
        }
        changed_.notify_all();
    }

    message<T> begin_receive()
    {
        std::unique_lock lock(mutex_);
        wait(
            lock, [&] { return sent_ > received_; }, "empty");
        const std::size_t slot = received_ % capacity_;
        return {&headers_[slot], values_.data() + slot * message_size_, message_size_};
    }
    void end_receive()
    {
        {
            std::lock_guard lock(mutex_);
            ++received_;
        }
        changed_.notify_all();
    }

    std::size_t memory_bytes() const { return values_.size() * sizeof(T) + headers_.size() * sizeof(message_header); }

    // The messages sent and not yet received, oldest first, valid until
    // the next send or receive (to check a pipeline restored from a
    // checkpoint). Neither side may be between begin and end.
    std::vector<message<T>> queued_messages()
    {
        std::lock_guard lock(mutex_);
        std::vector<message<T>> messages;
        for (std::size_t i = received_; i < sent_; ++i) {
            const std::size_t slot = i % capacity_;
            messages.push_back({&headers_[slot], values_.data() + slot * message_size_, message_size_});
        }
        return messages;
    }

    // The messages sent and not yet received, oldest first, for
    // checkpoints; read back, they refill an empty channel. Neither side may
    // be between begin and end.
    template <state_archive Archive>
    void transfer_state(Archive& archive)
    {
        std::lock_guard lock(mutex_);
        archive.section(name_);
        archive.expect(message_size_, "values per message");
        std::size_t queued = sent_ - received_;
        archive.count(queued, capacity_);
        if constexpr (Archive::loading) {
            if (sent_ != received_) {
                raise_error(error_kind::logic_error,
                            "channel '" + name_ + "': a checkpoint can only refill an empty channel.");
            }
            sent_ = received_ + queued;
        }
        for (std::size_t i = received_; i < sent_; ++i) {
            const std::size_t slot = i % capacity_;
            archive.count(headers_[slot].micro_batch, any_count);
            transfer_flag(archive, headers_[slot].end_of_epoch);
            archive.values(std::span<T>(values_.data() + slot * message_size_, message_size_));
        }
        if constexpr (Archive::loading) changed_.notify_all();
    }

private:
    template <class Ready>
    void wait(std::unique_lock<std::mutex>& lock, Ready ready, const char* state)
    {
        if (mode_ == channel_waiting::never) {
            if (!ready()) {
                raise_error(error_kind::logic_error, "pipeline schedule error: channel '" + name_ + "' is " + state +
                                                         " where the schedule says it cannot be.");
            }
            return;
        }
#if PETRA_EXCEPTIONS
        changed_.wait(lock, [&] { return ready() || stop_.stopped(); });
        if (stop_.stopped()) throw pipeline_stopped{};
#else
        // Without exceptions a stop only ends the pipeline's life: every stage
        // first finishes the ticks it was granted, so the message waited for
        // comes (see thread_pipeline.hpp).
        changed_.wait(lock, ready);
#endif
    }

    std::string name_;
    std::size_t capacity_;
    std::size_t message_size_;
    kernels::aligned_vector<T> values_;
    std::vector<message_header> headers_;
    std::size_t sent_ = 0;
    std::size_t received_ = 0;
    stop_signal& stop_;
    channel_waiting mode_;
};

static_assert(transport<channel<float>, float>);

} // namespace petra
