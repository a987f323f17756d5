// Replicas of an mpi_pipeline (for code that links MPI): D copies of the
// J-stage pipeline on D x R ranks, R ranks each (pipeline/replicas.hpp says
// what they compute; the simulator computes the same, bit for bit).
//
// Replica d holds ranks [d R, (d + 1) R) of the communicator given, and
// runs its pipeline over them as one pipeline runs over R ranks. For each
// stage, the D ranks that host it (one per replica) share a communicator of
// their own: before each step a stage gathers the D gradient sums on it
// (MPI_Allgather, replica order) and adds them in replica order, so that
// the sum does not depend on an MPI reduction's order and every replica
// applies the same update. The epoch's statistics and the running
// statistics travel the same way when an epoch ends. With one replica
// nothing here calls MPI beyond the communicator's duplicate.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <petra/error.hpp>
#include <petra/kernels/simd.hpp>
#include <petra/mpi/channel.hpp>
#include <petra/mpi/placement.hpp>
#include <petra/pipeline/accumulation.hpp>
#include <petra/pipeline/replicas.hpp>

namespace petra {

namespace detail {

// A communicator split from another (MPI_Comm_split), or none for a rank
// outside it; freed last.
class split_communicator {
public:
    split_communicator() = default;
    split_communicator(MPI_Comm parent, int color, int key)
    {
        check_mpi(MPI_Comm_split(parent, color, key, &communicator_), "MPI_Comm_split");
    }
    split_communicator(split_communicator&& other) noexcept : communicator_(other.communicator_)
    {
        other.communicator_ = MPI_COMM_NULL;
    }
    split_communicator& operator=(split_communicator&& other) noexcept
    {
        std::swap(communicator_, other.communicator_);
        return *this;
    }
    ~split_communicator()
    {
        if (communicator_ != MPI_COMM_NULL) MPI_Comm_free(&communicator_);
    }
    MPI_Comm get() const { return communicator_; }

private:
    MPI_Comm communicator_ = MPI_COMM_NULL;
};

} // namespace detail

template <class T>
class replica_group {
public:
    // Collective over `communicator`: its ranks split into `replicas`
    // pipelines of consecutive ranks. A rank count that is not a multiple
    // of the replicas is refused (invalid_argument) on every rank alike,
    // before any message.
    replica_group(MPI_Comm communicator, std::size_t replicas)
        : job_(communicator), replicas_(replicas), replica_(checked_replica(job_, replicas)),
          pipeline_(replicas == 1 ? detail::split_communicator()
                                  : detail::split_communicator(job_.get(), int(replica_), job_.rank()))
    {
    }

    // The replicas, and this rank's: 0 .. replicas() - 1.
    std::size_t replicas() const { return replicas_; }
    std::size_t replica() const { return replica_; }
    // Every rank of every replica (a duplicate of the communicator given).
    MPI_Comm job_communicator() const { return job_.get(); }
    // The buffers the stages of this rank gather into (memory_plan's
    // replica_exchange).
    std::size_t exchange_bytes() const
    {
        std::size_t bytes = 0;
        for (const auto& buffer : gathered_) bytes += buffer.size() * sizeof(T);
        return bytes;
    }

protected:
    // This replica's ranks: the pipeline runs over them.
    MPI_Comm pipeline_communicator() const { return replicas_ == 1 ? job_.get() : pipeline_.get(); }

    // Collective over the job: joins, for each stage, the ranks that host
    // it; hosts(j) says whether this rank does, values(j) how many values
    // of that stage (parameters, running statistics) it will gather.
    template <class Hosts, class Values>
    void connect_stages(std::size_t stage_count, Hosts&& hosts, Values&& values)
    {
        if (replicas_ == 1) return;
        stages_.resize(stage_count);
        gathered_.resize(stage_count);
        for (std::size_t j = 0; j < stage_count; ++j) {
            stages_[j] = detail::split_communicator(job_.get(), hosts(j) ? 0 : MPI_UNDEFINED, int(replica_));
            if (hosts(j)) gathered_[j].resize(replicas_ * values(j));
        }
    }

    // Collective over stage `stage`'s ranks: `values` replaced by the sum
    // over the replicas (average: their average), in replica order.
    void sum_across_replicas(std::size_t stage, std::span<T> values)
    {
        const auto gathered = gather(stage, values);
        add_in_replica_order(replicas_, gathered, values);
    }
    void average_across_replicas(std::size_t stage, std::span<T> values)
    {
        const auto gathered = gather(stage, values);
        average_in_replica_order(replicas_, gathered, values);
    }

    // Collective over the last stage's ranks: the epoch's statistics of
    // every replica, combined in replica order.
    epoch_statistics combine_statistics(std::size_t last_stage, const epoch_statistics& mine)
    {
        std::vector<epoch_statistics> all(replicas_);
        check_mpi(MPI_Allgather(&mine, int(sizeof mine), MPI_BYTE, all.data(), int(sizeof mine), MPI_BYTE,
                                stages_[last_stage].get()),
                  "mpi pipeline: replicas' statistics");
        return combine_replica_statistics(replicas_, [&](std::size_t d) { return all[d]; });
    }

private:
    static std::size_t checked_replica(const detail::owned_communicator& job, std::size_t replicas)
    {
        const auto ranks = std::size_t(job.size());
        if (replicas == 0) raise_error(error_kind::invalid_argument, "pipeline: the replicas must be at least 1.");
        if (ranks % replicas != 0) {
            raise_error(error_kind::invalid_argument,
                        "mpi pipeline: " + std::to_string(ranks) + " ranks cannot hold " + std::to_string(replicas) +
                            " replicas of equal size; launch a multiple of the replicas.");
        }
        return std::size_t(job.rank()) / (ranks / replicas);
    }

    // The D copies of `values` gathered on stage `stage`'s communicator, as
    // a function of the replica.
    auto gather(std::size_t stage, std::span<const T> values)
    {
        T* gathered = gathered_[stage].data();
        check_mpi(MPI_Allgather(values.data(), int(values.size()), mpi_type<T>(), gathered, int(values.size()),
                                mpi_type<T>(), stages_[stage].get()),
                  "mpi pipeline: replicas' gradients");
        return [gathered, size = values.size()](std::size_t d) {
            return std::span<const T>(gathered + d * size, size);
        };
    }

    detail::owned_communicator job_;
    std::size_t replicas_;
    std::size_t replica_;
    detail::split_communicator pipeline_;
    std::vector<detail::split_communicator> stages_; // [j]: the ranks hosting stage j, if this one does
    std::vector<kernels::aligned_vector<T>> gathered_;
};

} // namespace petra
