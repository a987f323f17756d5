// What a stage's worker on an MPI rank talks through (for code that links
// MPI): the channel to a neighbour stage on the same rank, or one end of an
// MPI channel to a neighbour on another rank. One transport type, so that
// the worker (pipeline/worker.hpp) stays as it is whichever its neighbours
// are.
#pragma once

#include <petra/mpi/channel.hpp>
#include <petra/pipeline/channel.hpp>

namespace petra {

template <class T>
class rank_link {
public:
    explicit rank_link(channel<T>& local) : local_(&local) {}
    explicit rank_link(mpi_channel<T>& remote) : remote_(&remote) {}

    message<T> begin_send() { return local_ != nullptr ? local_->begin_send() : remote_->begin_send(); }
    void end_send() { local_ != nullptr ? local_->end_send() : remote_->end_send(); }
    message<T> begin_receive() { return local_ != nullptr ? local_->begin_receive() : remote_->begin_receive(); }
    void end_receive() { local_ != nullptr ? local_->end_receive() : remote_->end_receive(); }

    channel<T>* local() const { return local_; }
    mpi_channel<T>* remote() const { return remote_; }

private:
    channel<T>* local_ = nullptr;
    mpi_channel<T>* remote_ = nullptr;
};

static_assert(transport<rank_link<float>, float> && transport<rank_link<std::int32_t>, std::int32_t>);

} // namespace petra
