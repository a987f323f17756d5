// Where an mpi_pipeline's stages live (for code that links MPI): the
// contiguous group of stages each rank of a communicator hosts, and the
// transports this rank's stages talk through, built from the pipeline's
// link plan (pipeline/links.hpp): an in-process channel where both ends
// are on this rank, one end of an mpi_channel where one is.
//
// Placement: rank r hosts stages [first_stage(), end_stage()), grouped by
// their per-tick cost (balanced_groups over the partitioner's stage costs).
// Rank 0 hosts stage 0 and feeds; the labels travel to the last stage's
// rank. A failure inside a stage ends the job (abort_on_failure). A communicator of more ranks than stages is refused
// (invalid_argument, raise_error), on every rank alike, before any message.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <petra/error.hpp>
#include <petra/kernels/simd.hpp>
#include <petra/mpi/channel.hpp>
#include <petra/mpi/rank_link.hpp>
#include <petra/parameter_slice.hpp>
#include <petra/partition.hpp>
#include <petra/pipeline/channel.hpp>
#include <petra/pipeline/links.hpp>
#include <petra/pipeline/options.hpp>
#include <petra/pipeline/stage.hpp>
#include <petra/pipeline/worker.hpp>
#include <petra/state_archive.hpp>

namespace petra {

// The stages each of `ranks` ranks hosts: ranks + 1 stage indices, rank r
// hosting [result[r], result[r + 1]), grouped by the stages' per-tick cost.
template <class Network, auto Cuts>
std::vector<std::size_t> stage_groups(std::size_t ranks)
{
    const auto costs = stage_costs(tick_costs<Network>(), last_stage_tick_costs<Network>(), Cuts);
    return balanced_groups(std::span<const std::size_t>(costs), ranks);
}

namespace detail {

// A duplicate of the caller's communicator, so that the pipeline's messages
// never meet the caller's; freed last.
class owned_communicator {
public:
    explicit owned_communicator(MPI_Comm parent) { check_mpi(MPI_Comm_dup(parent, &communicator_), "MPI_Comm_dup"); }
    owned_communicator(const owned_communicator&) = delete;
    owned_communicator& operator=(const owned_communicator&) = delete;
    ~owned_communicator() { MPI_Comm_free(&communicator_); }
    MPI_Comm get() const { return communicator_; }

    int rank() const
    {
        int rank = 0;
        check_mpi(MPI_Comm_rank(communicator_, &rank), "MPI_Comm_rank");
        return rank;
    }
    int size() const
    {
        int size = 0;
        check_mpi(MPI_Comm_size(communicator_, &size), "MPI_Comm_size");
        return size;
    }

private:
    MPI_Comm communicator_ = MPI_COMM_NULL;
};

} // namespace detail

// A stage this rank hosts: its own slice of the parameters (drawn as
// Network::make_parameters<T>(seed) draws them), of the weight mask, and
// its worker, talking through rank_link.
template <class Network, auto Cuts, class Optimizer, class T, std::size_t I>
struct hosted_stage {
    using slice_type = parameter_slice<Network, Cuts[I], Cuts[I + 1], T>;
    using worker_type = stage_worker<stage<Network, Cuts, I, T>, Optimizer, T, rank_link<T>, rank_link<std::int32_t>>;

    slice_type parameters;
    kernels::aligned_vector<T> weight_mask;
    worker_type worker;

    hosted_stage(std::uint64_t seed, const typename Optimizer::options& optimizer_options,
                 const pipeline_options& options, typename worker_type::links links, pipeline_shared<T>& shared)
        : parameters(seed), weight_mask(slice_type::weight_mask()),
          worker(parameters.values(), parameters.state(), optimizer_options, weight_mask, options, links, shared)
    {}
};

// The stages of a rank, one slot per stage of the pipeline, null for
// those hosted elsewhere.
template <class Network, auto Cuts, class Optimizer, class T, class Indices = std::make_index_sequence<Cuts.size() - 1>>
struct hosted_stages;
template <class Network, auto Cuts, class Optimizer, class T, std::size_t... I>
struct hosted_stages<Network, Cuts, Optimizer, T, std::index_sequence<I...>> {
    using type = std::tuple<std::unique_ptr<hosted_stage<Network, Cuts, Optimizer, T, I>>...>;
};

template <class Network, auto Cuts, class T>
class rank_placement {
    using layout = pipeline_layout<Network, Cuts, T>;

public:
    static constexpr std::size_t stage_count = Cuts.size() - 1;

    explicit rank_placement(MPI_Comm communicator)
        : communicator_(communicator), rank_(communicator_.rank()), ranks_(communicator_.size()),
          groups_(checked_groups(ranks_))
    {}
    rank_placement(const rank_placement&) = delete;
    rank_placement& operator=(const rank_placement&) = delete;

    int rank() const { return rank_; }
    int ranks() const { return ranks_; }
    // The stages this rank hosts: [first_stage(), end_stage()).
    std::size_t first_stage() const { return groups_[std::size_t(rank_)]; }
    std::size_t end_stage() const { return groups_[std::size_t(rank_) + 1]; }
    bool hosts(std::size_t stage) const { return stage >= first_stage() && stage < end_stage(); }
    int rank_of(std::size_t stage) const
    {
        return int(std::upper_bound(groups_.begin(), groups_.end(), stage) - groups_.begin()) - 1;
    }
    // The rank that reads the images and labels (it hosts stage 0), and the
    // one that scores the micro-batches (it hosts the last stage).
    bool feeds() const { return rank_ == 0; }
    bool scores() const { return hosts(stage_count - 1); }
    const std::vector<std::size_t>& stage_groups_of_ranks() const { return groups_; }
    // The pipeline's own communicator (a duplicate of the one given).
    MPI_Comm communicator() const { return communicator_.get(); }

    // Bytes this rank has sent to other ranks on the channel named (such as
    // "forward into stage 2", "backward into stage 1", "labels"), headers
    // included; 0 for a channel it does not send on.
    std::size_t bytes_sent(const std::string& channel_name) const
    {
        std::size_t bytes = 0;
        for_each_sending_end([&](const auto& end, std::size_t) {
            if (end.name() == channel_name) bytes = end.bytes_sent();
        });
        return bytes;
    }

protected:
    // The links of the plan, for micro-batches of `batch` examples; local
    // channels wake on `stop`, and wait for the other side when the
    // stages run on threads (otherwise never: the caller's thread runs
    // them in order, so a message is always there when the schedule reads
    // it). A link between two other ranks is null.
    void make_links(std::size_t batch, stop_signal& stop, bool threaded)
    {
        const channel_waiting waiting = threaded ? channel_waiting::blocking : channel_waiting::never;
        forward_links_.resize(stage_count);
        backward_links_.resize(stage_count);
        for (std::size_t j = 0; j < stage_count; ++j) {
            forward_links_[j] =
                make_link(layout::forward_link(j, batch), forward_link_index(j), stop, waiting, local_, remote_);
            if (j + 1 < stage_count) {
                backward_links_[j] = make_link(layout::backward_link(j, batch), backward_link_index(stage_count, j),
                                               stop, waiting, local_, remote_);
            }
        }
        labels_link_ = make_link(layout::labels_link(batch), labels_link_index(stage_count), stop, waiting,
                                 local_labels_, remote_labels_);
    }

    // Calls visit(mpi_channel&, link index) for every sending end on this
    // rank.
    template <class Visit>
    void for_each_sending_end(Visit&& visit) const
    {
        const auto visit_link = [&](const auto& link, std::size_t index) {
            if (link && link->remote() && link->remote()->end() == channel_end::sending) visit(*link->remote(), index);
        };
        for (std::size_t j = 0; j < stage_count; ++j) {
            visit_link(forward_links_[j], forward_link_index(j));
            visit_link(backward_links_[j], backward_link_index(stage_count, j));
        }
        visit_link(labels_link_, labels_link_index(stage_count));
    }

    // The messages in transit on a link into a stage of this rank: a local
    // channel saves its own; the receiving end of an MPI channel needs its
    // sender's count (`counts`, indexed by link, when saving).
    template <state_archive Archive, class Value>
    static void transfer_link(Archive& archive, rank_link<Value>& link, const std::vector<std::uint64_t>& counts,
                              std::size_t index)
    {
        if (link.local() != nullptr) link.local()->transfer_state(archive);
        else link.remote()->transfer_state(archive, Archive::loading ? 0 : std::size_t(counts[index]));
    }

    std::size_t channel_bytes() const
    {
        std::size_t bytes = 0;
        for (const auto& channel : local_) bytes += channel->memory_bytes();
        for (const auto& channel : remote_) bytes += channel->memory_bytes();
        for (const auto& channel : local_labels_) bytes += channel->memory_bytes();
        for (const auto& channel : remote_labels_) bytes += channel->memory_bytes();
        return bytes;
    }

    // A stage's failure ends the job (see the top of mpi/pipeline.hpp).
    // epoch: the pipeline's count of epochs done, read at the failure.
    auto abort_on_failure(const std::size_t& epoch) const
    {
        return [this, &epoch](std::size_t stage, std::size_t tick, const char* what) {
            const std::string micro_batch =
                tick >= stage ? "forwarding micro-batch " + std::to_string(tick - stage) : "before its first forward";
            std::fprintf(stderr,
                         "petra: rank %d of %d (stages %zu to %zu, blocks %zu to %zu) failed in stage %zu at tick "
                         "%zu of epoch %zu (%s): %s\n",
                         rank_, ranks_, first_stage(), end_stage() - 1, Cuts[first_stage()], Cuts[end_stage()] - 1,
                         stage, tick, epoch + 1, micro_batch.c_str(), what);
            end_job();
        };
    }
    [[noreturn]] void abort_rank(const char* what) const
    {
        std::fprintf(stderr, "petra: rank %d of %d (stages %zu to %zu): %s; ending the job.\n", rank_, ranks_,
                     first_stage(), end_stage() - 1, what);
        end_job();
    }
    [[noreturn]] void end_job() const
    {
        std::fflush(stderr);
        MPI_Abort(communicator_.get(), 1);
        std::abort(); // MPI_Abort does not return
    }

    detail::owned_communicator communicator_;
    int rank_;
    int ranks_;
    std::vector<std::size_t> groups_;
    std::vector<std::unique_ptr<channel<T>>> local_;
    std::vector<std::unique_ptr<mpi_channel<T>>> remote_;
    std::vector<std::unique_ptr<channel<std::int32_t>>> local_labels_;
    std::vector<std::unique_ptr<mpi_channel<std::int32_t>>> remote_labels_;
    std::vector<std::unique_ptr<rank_link<T>>> forward_links_;  // [j]: into stage j
    std::vector<std::unique_ptr<rank_link<T>>> backward_links_; // [j]: from stage j + 1 into stage j
    std::unique_ptr<rank_link<std::int32_t>> labels_link_;

private:
    static std::vector<std::size_t> checked_groups(int size)
    {
        if (std::size_t(size) > stage_count) {
            raise_error(error_kind::invalid_argument,
                        "mpi pipeline: " + std::to_string(size) + " ranks for " + std::to_string(stage_count) +
                            " stages; every rank needs at least one stage: launch at most " +
                            std::to_string(stage_count) + " ranks.");
        }
        return stage_groups<Network, Cuts>(std::size_t(size));
    }

    // One link, seen from this rank; the link's number is its MPI tag.
    template <class Value>
    std::unique_ptr<rank_link<Value>> make_link(const link_plan& plan, std::size_t tag, stop_signal& stop,
                                                channel_waiting waiting,
                                                std::vector<std::unique_ptr<channel<Value>>>& local,
                                                std::vector<std::unique_ptr<mpi_channel<Value>>>& remote)
    {
        const int sender = rank_of(plan.sender), receiver = rank_of(plan.receiver);
        if (sender == rank_ && receiver == rank_) {
            local.push_back(
                std::make_unique<channel<Value>>(plan.name, plan.capacity, plan.message_values, stop, waiting));
            return std::make_unique<rank_link<Value>>(*local.back());
        }
        if (sender != rank_ && receiver != rank_) return nullptr;
        const bool sending = sender == rank_;
        remote.push_back(std::make_unique<mpi_channel<Value>>(
            plan.name, sending ? channel_end::sending : channel_end::receiving, communicator_.get(),
            sending ? receiver : sender, int(tag), plan.capacity, plan.message_values));
        return std::make_unique<rank_link<Value>>(*remote.back());
    }
};

} // namespace petra
