// A transport between MPI ranks (for code that links MPI; petra::petra does
// not need it): one end of a channel whose other end lives in another
// process. It satisfies the transport concept (pipeline/channel.hpp), so a
// stage's worker runs over it unchanged.
//
// Each end holds `capacity` slots, allocated once: a slot is a 64-byte
// header (message_header) followed by message_size values, sent as one
// message of bytes. Nothing is allocated per message.
//
// - The receiving end posts a nonblocking receive into every slot before
//   its first message is read, and posts it again as soon as a message is
//   read, so that the next messages land while the stage computes.
//   begin_receive() waits for the oldest slot's receive to complete.
// - The sending end writes in place in a slot; end_send() starts a
//   synchronous-mode nonblocking send (MPI_Issend) of it and returns at
//   once. begin_send() waits for the send last started from that slot. A
//   synchronous send completes only once the receiver has posted the receive
//   it matches, so a sender is at most 2 x capacity messages ahead of its
//   reader and no message ever waits in MPI's own buffers.
//   An end-of-epoch marker travels as its header alone.
//
// Messages between two ranks on one tag arrive in the order sent; each
// channel has its own tag on the pipeline's own communicator.
//
// Checkpoints: the receiving end saves the messages sent and not yet read,
// as channel<T>::transfer_state does (the same records, so a checkpoint
// moves between drivers). How many there are is known only with the
// sender's count, which the caller gathers (messages_sent()); read back,
// they fill the first slots and the receives are posted behind them.
//
// Both ends must be used from one thread at a time. A failed MPI call is
// a runtime_error reported through raise_error (error.hpp), naming the
// channel (with MPI's default error handler, MPI ends the job first).
#pragma once

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

#include <petra/error.hpp>
#include <petra/kernels/simd.hpp>
#include <petra/pipeline/channel.hpp>
#include <petra/state_archive.hpp>

namespace petra {

// Reports a runtime_error (raise_error) naming `what` (and the channel
// `name`, if any) unless code is MPI_SUCCESS. Nothing is built unless it
// fails: calls on every message must not allocate.
inline void check_mpi(int code, std::string_view what, std::string_view name = {})
{
    if (code == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(code, text, &length);
    const std::string where =
        name.empty() ? std::string(what) : "channel '" + std::string(name) + "': " + std::string(what);
    raise_error(error_kind::runtime_error, where + ": " + std::string(text, std::size_t(length)));
}

// The MPI datatype of float or double values.
template <class T>
MPI_Datatype mpi_type()
{
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "MPI values are float or double here.");
    return std::is_same_v<T, float> ? MPI_FLOAT : MPI_DOUBLE;
}

enum class channel_end { sending, receiving };

template <class T>
class mpi_channel {
public:
    static constexpr std::size_t header_bytes = 64;
    static_assert(sizeof(message_header) <= header_bytes);

    // One end of the channel `name`: this rank sends to (or receives from)
    // rank `peer` of `communicator`, on `tag`.
    mpi_channel(std::string name, channel_end end, MPI_Comm communicator, int peer, int tag, std::size_t capacity,
                std::size_t message_size)
        : name_(std::move(name)), end_(end), communicator_(communicator), peer_(peer), tag_(tag), capacity_(capacity),
          message_size_(message_size), slot_bytes_(header_bytes + round_up(message_size * sizeof(T))),
          buffer_(capacity * slot_bytes_), requests_(capacity, MPI_REQUEST_NULL)
    {
        if (capacity == 0) {
            raise_error(error_kind::invalid_argument, "channel '" + name_ + "': a capacity of at least 1 is needed.");
        }
    }
    mpi_channel(const mpi_channel&) = delete;
    mpi_channel& operator=(const mpi_channel&) = delete;

    // Never waits on the other side, which may have failed: receives still
    // posted are cancelled; a send its receiver has not matched yet is let
    // go (MPI_Request_free), and its slots are then left allocated, as MPI
    // may still read them. Between epochs every send has been matched.
    ~mpi_channel()
    {
        bool unmatched = false;
        for (MPI_Request& request : requests_) {
            if (request == MPI_REQUEST_NULL) continue;
            if (end_ == channel_end::receiving) {
                MPI_Cancel(&request);
                MPI_Wait(&request, MPI_STATUS_IGNORE);
                continue;
            }
            int done = 0;
            MPI_Test(&request, &done, MPI_STATUS_IGNORE);
            if (!done) {
                MPI_Request_free(&request);
                unmatched = true;
            }
        }
        if (unmatched) {
            [[maybe_unused]] auto* kept = new kernels::aligned_vector<std::byte>(std::move(buffer_)); // never freed
        }
    }

    message<T> begin_send()
    {
        require(channel_end::sending, "begin_send");
        const std::size_t slot = sent_ % capacity_;
        wait(slot);
        return view(slot);
    }
    void end_send()
    {
        const std::size_t slot = sent_ % capacity_;
        const bool marker = header(slot)->end_of_epoch;
        const std::size_t bytes = header_bytes + (marker ? 0 : message_size_ * sizeof(T));
        check_mpi(MPI_Issend(slot_data(slot), int(bytes), MPI_BYTE, peer_, tag_, communicator_, &requests_[slot]),
                  "send", name_);
        ++sent_;
        bytes_sent_ += bytes;
    }

    message<T> begin_receive()
    {
        require(channel_end::receiving, "begin_receive");
        if (!started_) start();
        const std::size_t slot = received_ % capacity_;
        wait(slot);
        return view(slot);
    }
    void end_receive()
    {
        const std::size_t slot = received_ % capacity_;
        ++received_;
        post(slot);
    }

    channel_end end() const { return end_; }
    const std::string& name() const { return name_; }
    // Messages this end has sent since it was made (the sending end).
    std::size_t messages_sent() const { return sent_; }
    // Bytes this end has sent, headers included.
    std::size_t bytes_sent() const { return bytes_sent_; }
    std::size_t memory_bytes() const { return buffer_.size(); }

    // The receiving end: the messages its sender has sent (sender_count,
    // the sending end's messages_sent()) and this end has not read, oldest
    // first, in channel<T>'s records; read back (sender_count unused), they
    // refill a channel that has not been read from yet.
    template <state_archive Archive>
    void transfer_state(Archive& archive, std::size_t sender_count)
    {
        require(channel_end::receiving, "transfer_state");
        archive.section(name_);
        archive.expect(message_size_, "values per message");
        std::size_t queued = Archive::loading ? 0 : loaded_ + sender_count - received_;
        archive.count(queued, capacity_);
        if constexpr (Archive::loading) {
            if (started_ || received_ != 0) {
                raise_error(error_kind::logic_error,
                            "channel '" + name_ + "': a checkpoint can only refill an unused channel.");
            }
            loaded_ = queued;
        } else if (!started_ && queued > 0) {
            start();
        }
        for (std::size_t i = received_; i < received_ + queued; ++i) {
            const std::size_t slot = i % capacity_;
            if constexpr (!Archive::loading) wait(slot); // sent, so its receive completes
            message_header& stored = *header(slot);
            archive.count(stored.micro_batch, any_count);
            transfer_flag(archive, stored.end_of_epoch);
            archive.values(std::span<T>(values(slot), message_size_));
        }
    }

private:
    static std::size_t round_up(std::size_t bytes) { return (bytes + header_bytes - 1) / header_bytes * header_bytes; }

    std::byte* slot_data(std::size_t slot) { return buffer_.data() + slot * slot_bytes_; }
    message_header* header(std::size_t slot) { return reinterpret_cast<message_header*>(slot_data(slot)); }
    T* values(std::size_t slot) { return reinterpret_cast<T*>(slot_data(slot) + header_bytes); }
    message<T> view(std::size_t slot) { return {header(slot), values(slot), message_size_}; }

    void require(channel_end end, const char* operation) const
    {
        if (end_ != end) {
            raise_error(error_kind::logic_error, "channel '" + name_ + "': " + operation + " on its " +
                                                     (end_ == channel_end::sending ? "sending" : "receiving") +
                                                     " end.");
        }
    }

    // Receives into every slot not filled by a checkpoint, in the order
    // messages will arrive.
    void start()
    {
        started_ = true;
        for (std::size_t slot = loaded_; slot < capacity_; ++slot) post(slot);
    }

    void post(std::size_t slot)
    {
        check_mpi(MPI_Irecv(slot_data(slot), int(slot_bytes_), MPI_BYTE, peer_, tag_, communicator_, &requests_[slot]),
                  "receive", name_);
    }

    // Polls, then sleeps between polls: a stage waiting for its neighbour
    // leaves the core to whatever else runs there (another stage's thread,
    // another rank), as a thread pipeline's waiting stage does, where
    // MPI_Wait would spin on it. A message waits at most a sleep (50 us)
    // longer; a tick takes tens of milliseconds.
    void wait(std::size_t slot)
    {
        for (int polls = 0;; ++polls) {
            int done = 0;
            check_mpi(MPI_Test(&requests_[slot], &done, MPI_STATUS_IGNORE), "wait", name_);
            if (done) return;
            if (polls >= 64) std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
    }

    std::string name_;
    channel_end end_;
    MPI_Comm communicator_;
    int peer_;
    int tag_;
    std::size_t capacity_;
    std::size_t message_size_;
    std::size_t slot_bytes_;
    kernels::aligned_vector<std::byte> buffer_;
    std::vector<MPI_Request> requests_;
    std::size_t sent_ = 0;
    std::size_t received_ = 0;
    std::size_t loaded_ = 0; // messages a checkpoint put in the first slots
    bool started_ = false;
    std::size_t bytes_sent_ = 0;
};

static_assert(transport<mpi_channel<float>, float> && transport<mpi_channel<std::int32_t>, std::int32_t>);

} // namespace petra
