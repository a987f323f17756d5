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

#include <atomic>
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
#include <petra/pipeline/worker.hpp>

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
    {}

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
    // How many parts of gradient sums this rank has started during the
    // backwards (the exchange overlapping compute), in all.
    std::size_t parts_started() const { return parts_started_.load(); }

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
        exchanges_.resize(stage_count);
        for (std::size_t j = 0; j < stage_count; ++j) {
            stages_[j] = detail::split_communicator(job_.get(), hosts(j) ? 0 : MPI_UNDEFINED, int(replica_));
            if (hosts(j)) gathered_[j].resize(replicas_ * values(j));
        }
    }

    // Has every step of `shared`'s stages sum its gradient over the
    // replicas, each block's part leaving while the blocks below it
    // differentiate; gradient_size(j) is stage j's gradient size. Nothing
    // with one replica.
    template <class GradientSize>
    void share_sums(pipeline_shared<T>& shared, GradientSize gradient_size)
    {
        if (replicas_ == 1) return;
        shared.sum_across_replicas = [this](std::size_t j, std::span<T> sum) { sum_across_replicas(j, sum); };
        shared.begin_replica_sum = [this, gradient_size](std::size_t j, std::size_t offset, std::span<const T> part) {
            begin_sum(j, gradient_size(j), offset, part);
        };
    }

    // Collective over stage `stage`'s ranks: `values` replaced by the sum
    // over the replicas (average: their average), in replica order. With
    // begin_sum(stage, ...) called since the last sum, waits for the parts
    // it started and gathers the rest.
    void sum_across_replicas(std::size_t stage, std::span<T> values)
    {
        exchange& started = exchanges_[stage];
        const std::size_t unsent = started.requests.empty() ? values.size() : started.first;
        check_mpi(MPI_Waitall(int(started.requests.size()), started.requests.data(), MPI_STATUSES_IGNORE),
                  "mpi pipeline: replicas' gradients");
        started.requests.clear();
        if (unsent != 0) gather_part(stage, values.size(), 0, values.first(unsent), nullptr);
        add_in_replica_order(replicas_, gathered(stage, values.size()), values);
    }
    void average_across_replicas(std::size_t stage, std::span<T> values)
    {
        gather_part(stage, values.size(), 0, values, nullptr);
        average_in_replica_order(replicas_, gathered(stage, values.size()), values);
    }

    // Starts gathering part of a stage's sum, values [offset, offset +
    // part.size()) of `size`, as sum_across_replicas would: each part must
    // end where the previous one began (the stage's blocks, last first), and
    // stay untouched until sum_across_replicas(stage, ...) returns. Also lets
    // the parts started before it progress.
    void begin_sum(std::size_t stage, std::size_t size, std::size_t offset, std::span<const T> part)
    {
        exchange& started = exchanges_[stage];
        if (started.requests.empty()) started.first = size;
        if (offset + part.size() != started.first) {
            raise_error(error_kind::logic_error, "mpi pipeline: a stage's gradient parts must be exchanged from "
                                                 "its last block down, each ending where the previous began.");
        }
        if (!part.empty()) {
            started.requests.push_back(MPI_REQUEST_NULL);
            gather_part(stage, size, offset, part, &started.requests.back());
            started.first = offset;
        }
        int done = 0;
        check_mpi(MPI_Testall(int(started.requests.size()), started.requests.data(), &done, MPI_STATUSES_IGNORE),
                  "mpi pipeline: replicas' gradients");
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

    // The D copies of a stage's `size` values gathered_ holds, as a function
    // of the replica.
    auto gathered(std::size_t stage, std::size_t size) const
    {
        const T* values = gathered_[stage].data();
        return [values, size](std::size_t d) { return std::span<const T>(values + d * size, size); };
    }

    // part[i], values [offset, offset + part.size()) of each replica's
    // `size`, gathered into gathered_[stage] at d x size + offset: at once
    // (request null) or started (MPI_Iallgatherv) into *request. The counts
    // and displacements of a started part live until the step's sum.
    void gather_part(std::size_t stage, std::size_t size, std::size_t offset, std::span<const T> part,
                     MPI_Request* request)
    {
        exchange& started = exchanges_[stage];
        if (started.arguments.size() <= started.requests.size()) started.arguments.emplace_back();
        std::vector<int>& arguments =
            started.arguments[request ? started.requests.size() - 1 : started.requests.size()];
        arguments.assign(2 * replicas_, int(part.size()));
        for (std::size_t d = 0; d < replicas_; ++d) arguments[replicas_ + d] = int(d * size + offset);
        T* gathered = gathered_[stage].data();
        if (request) {
            ++parts_started_;
            check_mpi(MPI_Iallgatherv(part.data(), int(part.size()), mpi_type<T>(), gathered, arguments.data(),
                                      arguments.data() + replicas_, mpi_type<T>(), stages_[stage].get(), request),
                      "mpi pipeline: replicas' gradients");
        } else {
            check_mpi(MPI_Allgatherv(part.data(), int(part.size()), mpi_type<T>(), gathered, arguments.data(),
                                     arguments.data() + replicas_, mpi_type<T>(), stages_[stage].get()),
                      "mpi pipeline: replicas' gradients");
        }
    }

    // A stage's sum in parts: the requests started, the first value they
    // cover (the parts run from there to the end), and each request's
    // counts and displacements (kept from step to step: no allocation once
    // the first step has run).
    struct exchange {
        std::vector<MPI_Request> requests;
        std::size_t first = 0;
        std::vector<std::vector<int>> arguments;
    };

    detail::owned_communicator job_;
    std::size_t replicas_;
    std::size_t replica_;
    detail::split_communicator pipeline_;
    std::vector<detail::split_communicator> stages_; // [j]: the ranks hosting stage j, if this one does
    std::vector<kernels::aligned_vector<T>> gathered_;
    std::vector<exchange> exchanges_;
    std::atomic<std::size_t> parts_started_ = 0; // stages' threads may start parts at once
};

} // namespace petra
