// PETRA's pipeline over MPI ranks (for code that links MPI; petra::petra
// does not need it): the J stages of a network cut at Cuts, spread over the
// R ranks of a communicator, R <= J. Every rank runs the same program:
//
//   petra::mpi_session mpi(argc, argv);
//   mpi_pipeline<net, cuts, sgd<float>> pipeline(MPI_COMM_WORLD, /*seed=*/1, sgd_options{}, schedule,
//                                                {.batch = 64});
//   for (each micro-batch) pipeline.feed(images, labels);  // read only on the rank that feeds
//   epoch_statistics epoch = pipeline.drain();              // the same on every rank
//
// Placement: rank r hosts the contiguous group of stages [first_stage(),
// end_stage()), the stages grouped again by their cost
// (balanced_groups over the partitioner's stage costs). Rank 0 hosts stage
// 0 and feeds: it reads the images and labels; the labels travel to the
// last stage's rank with MPI. Stages on one rank talk through the in-process
// channel, stages on two ranks through mpi_channel (both behind rank_link,
// so the worker is the thread pipeline's own).
//
// Memory: each rank allocates only its own stages' parameters and running
// statistics (parameter_slice, initialised as make_parameters(seed) would),
// optimizer state, FIFOs and buffers, and the channels at its edges: never
// the whole network.
//
// Schedule: each feed() runs one tick of every stage this rank hosts: on
// the caller's thread, before it returns, when the rank hosts one stage;
// on one thread per stage, as thread_pipeline does, when it hosts several
// (given MPI_THREAD_MULTIPLE; otherwise on the caller's thread, in stage
// order). Ranks wait for one another only through their messages, and
// every tick reads what its neighbours produced at the tick before, so the
// numbers are those of sequential_pipeline, bit for bit (tested for several
// (R, J), k = 1, 2 and every buffer option). drain() runs the ticks that
// empty the pipeline and returns the epoch's statistics on every rank.
//
// Collective calls (every rank of the communicator, in the same order):
// the constructor, feed(), drain(), evaluate(), gather_parameters(),
// fold_stages(), and the checkpoint calls.
//
// Failures: a rank's neighbours wait for messages a failed stage will never
// send, so an exception in any stage ends the whole job: the rank prints
// one line naming itself, its stages, the tick and the micro-batch, then
// calls MPI_Abort with status 1. A communicator of more ranks than stages
// is refused by the constructor, on every rank alike and before any
// message, with std::invalid_argument.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <petra/batch_view.hpp>
#include <petra/kernels/simd.hpp>
#include <petra/layers/softmax_cross_entropy_loss.hpp>
#include <petra/mpi/channel.hpp>
#include <petra/mpi/rank_link.hpp>
#include <petra/network.hpp>
#include <petra/parameter_slice.hpp>
#include <petra/partition.hpp>
#include <petra/pipeline/accumulation.hpp>
#include <petra/pipeline/channel.hpp>
#include <petra/pipeline/core.hpp>
#include <petra/pipeline/options.hpp>
#include <petra/pipeline/stage.hpp>
#include <petra/pipeline/worker.hpp>
#include <petra/state_archive.hpp>
#include <petra/tensor_batch.hpp>
#include <petra/type_list.hpp>

namespace petra {

// The stages each of `ranks` ranks hosts: ranks + 1 stage indices, rank r
// hosting [result[r], result[r + 1]), grouped by the stages' per-tick cost.
template <class Network, auto Cuts>
std::vector<std::size_t> stage_groups(std::size_t ranks)
{
    const auto costs = stage_costs(tick_costs<Network>(), last_stage_tick_costs<Network>(), Cuts);
    return balanced_groups(std::span<const std::size_t>(costs), ranks);
}

// A score of a forward-only pass: examples, how many were classified right,
// and the sum over the examples of their loss.
struct inference_score {
    std::size_t examples = 0;
    std::size_t correct = 0;
    double loss_sum = 0;

    double mean_loss() const { return examples == 0 ? 0.0 : loss_sum / double(examples); }
    double accuracy() const { return examples == 0 ? 0.0 : double(correct) / double(examples); }
};

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

private:
    MPI_Comm communicator_ = MPI_COMM_NULL;
};

inline int communicator_rank(MPI_Comm communicator)
{
    int rank = 0;
    check_mpi(MPI_Comm_rank(communicator, &rank), "MPI_Comm_rank");
    return rank;
}
inline int communicator_size(MPI_Comm communicator)
{
    int size = 0;
    check_mpi(MPI_Comm_size(communicator, &size), "MPI_Comm_size");
    return size;
}

} // namespace detail

template <class Network, auto Cuts, class Optimizer, class T = float>
class mpi_pipeline : public feed_forms<mpi_pipeline<Network, Cuts, Optimizer, T>, Network, T> {
    using forms = feed_forms<mpi_pipeline<Network, Cuts, Optimizer, T>, Network, T>;

public:
    static constexpr std::size_t stage_count = Cuts.size() - 1;
    static_assert(valid_cuts<Network>(Cuts),
                  "The cuts must run from 0 to the network's block count, every stage holding at least one block.");

    template <std::size_t I>
    using stage_type = stage<Network, Cuts, I, T>;
    template <std::size_t I>
    using slice_type = parameter_slice<Network, Cuts[I], Cuts[I + 1], T>;
    template <std::size_t I>
    using worker_type = stage_worker<stage_type<I>, Optimizer, T, rank_link<T>, rank_link<std::int32_t>>;

    // Collective. Each rank builds its own stages, their parameters drawn
    // as Network::make_parameters<T>(seed) draws them.
    mpi_pipeline(MPI_Comm communicator, std::uint64_t seed, const typename Optimizer::options& optimizer_options,
                 std::function<double(std::size_t)> learning_rate, const pipeline_options& options)
        : mpi_pipeline(checked_placement(communicator), communicator, seed, optimizer_options,
                       std::move(learning_rate), options)
    {
    }
    mpi_pipeline(const mpi_pipeline&) = delete;
    mpi_pipeline& operator=(const mpi_pipeline&) = delete;

    // Between epochs, or where every rank stopped feeding at the same
    // micro-batch (the stages finish the ticks granted, then the threads
    // are joined). An exception leaving the pipeline's scope in the middle
    // of an epoch, while this rank's stage threads still run, ends the job:
    // they cannot be stopped inside MPI.
    ~mpi_pipeline()
    {
        stop_threads();
        finish_progress_broadcast();
    }

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
    // Whether this rank runs its stages on one thread each (it hosts more
    // than one, and MPI gives MPI_THREAD_MULTIPLE), or on the caller's
    // thread inside feed().
    bool threaded() const { return threaded_; }
    const std::vector<std::size_t>& stage_groups_of_ranks() const { return groups_; }
    const pipeline_options& options() const { return options_; }

    // Observes every forward, backward and step of this rank's stages.
    void set_trace(std::function<void(const pipeline_event<T>&)> trace) { shared_.trace = std::move(trace); }

    // The other forms: pointers, or tensors (feed_forms, pipeline/core.hpp).
    using forms::feed;

    // Collective: one micro-batch of options().batch images and as many
    // labels, read on the rank that feeds (the others pass none: feed()),
    // then one tick of every stage this rank hosts: run before feed()
    // returns, or granted to the stages' threads.
    void feed(const_batch<T, typename Network::input> images, std::span<const std::int32_t> labels)
    {
        if (feeds()) {
            if (!images || labels.data() == nullptr) {
                raise_error(error_kind::invalid_argument,
                            "mpi pipeline: the rank that feeds needs the images and labels.");
            }
            detail::check_micro_batch(options_.batch, images.batch(), labels.size());
            send_micro_batch(images.data(), labels.data());
        }
        ++fed_;
        if (!threaded_) {
            run_tick();
            return;
        }
        {
            std::lock_guard lock(mutex_);
            granted_ = fed_;
        }
        to_stages_.notify_all();
    }
    // On a rank that does not feed: the tick, without data.
    void feed() { feed(const_batch<T, typename Network::input>(), {}); }

    // Collective: ends the epoch (every micro-batch fed differentiated by
    // every stage, a last partial accumulation applied) and returns its
    // statistics, the same on every rank.
    epoch_statistics drain()
    {
        if (feeds()) send_end_of_epoch();
        if (threaded_) {
            std::unique_lock lock(mutex_);
            granted_ = std::numeric_limits<std::size_t>::max();
            to_stages_.notify_all();
            to_caller_.wait(lock, [&] { return finished_ == end_stage() - first_stage(); });
            finished_ = 0;
            granted_ = 0;
        } else {
            while (!run_tick()) {
            }
        }
        epoch_statistics epoch;
        {
            std::lock_guard lock(shared_.statistics_mutex);
            epoch = std::exchange(shared_.statistics, {});
        }
        finish_progress_broadcast();
        progress_seen_ = {};
        broadcast_from(rank_of(stage_count - 1), epoch);
        // Every stage's thread waits for the next epoch: none touches its
        // worker.
        start_epoch();
        {
            std::lock_guard lock(mutex_);
            ++epoch_;
        }
        to_stages_.notify_all();
        return epoch;
    }

    // Collective, when called at all (every rank, after each feed): the
    // current epoch's statistics so far. The rank that scores returns its
    // own once its stages have run the tick of the last feed; the others
    // those it had at the call before, broadcast without waiting (a
    // nonblocking broadcast started at each call and completed at the
    // next), so that rank 0 reports progress as the thread pipeline does,
    // a micro-batch late.
    epoch_statistics progress()
    {
        if (scores()) wait_until_idle();
        epoch_statistics local;
        {
            std::lock_guard lock(shared_.statistics_mutex);
            local = shared_.statistics;
        }
        finish_progress_broadcast();
        progress_sent_ = local;
        check_mpi(MPI_Ibcast(&progress_sent_, int(sizeof(epoch_statistics)), MPI_BYTE, rank_of(stage_count - 1),
                             communicator_.get(), &progress_request_),
                  "mpi pipeline: progress");
        return scores() ? local : progress_seen_;
    }

    // Collective: a forward-only pass (running statistics, nothing updated)
    // of `count` images through the ranks, `chunk` at a time, scored against
    // their labels; images and labels are read on the rank that feeds. The
    // score, the same on every rank, sums each chunk's mean loss times its
    // size, in order.
    inference_score evaluate(const T* images, const std::int32_t* labels, std::size_t count, std::size_t chunk = 250);

    // Collective: every stage's parameters and running statistics copied
    // into *whole on rank `root` (others pass nullptr). For tests and
    // reports: training never gathers.
    void gather_parameters(network_parameters<Network, T>* whole, int root = 0);

    // Collective: fold(state, stage index, values, running statistics)
    // applied to every stage in order, each on its own rank, the state
    // passed from rank to rank; returns the final state on every rank.
    template <class Fold>
    std::uint64_t fold_stages(std::uint64_t state, Fold&& fold);

    // Bytes held by this rank: its stages' parameters, statistics,
    // optimizer state, FIFOs and buffers, and its channels.
    std::size_t memory_bytes() const;

    // Bytes this rank has sent to other ranks on the channel named (such as
    // "forward into stage 2", "backward into stage 1", "labels"), headers
    // included; 0 for a channel it does not send on.
    std::size_t bytes_sent(const std::string& channel_name) const
    {
        for (const auto& channel : remote_) {
            if (channel->name() == channel_name && channel->end() == channel_end::sending) return channel->bytes_sent();
        }
        for (const auto& channel : remote_labels_) {
            if (channel->name() == channel_name && channel->end() == channel_end::sending) return channel->bytes_sent();
        }
        return 0;
    }

    // The pipeline's own communicator (a duplicate of the one given).
    MPI_Comm communicator() const { return communicator_.get(); }

    // Collective, before this rank saves its stages: how many messages the
    // sending end of every channel between two ranks has sent (indexed as
    // channel_index), which the receiving ends need to save what is in
    // transit.
    std::vector<std::uint64_t> channel_counts()
    {
        wait_until_idle();
        std::vector<std::uint64_t> mine(2 * stage_count + 1, 0), all(mine.size(), 0);
        const auto count = [&](const auto& link, std::size_t index) {
            if (link && link->remote() && link->remote()->end() == channel_end::sending) {
                mine[index] = link->remote()->messages_sent();
            }
        };
        for (std::size_t j = 0; j < stage_count; ++j) {
            count(forward_links_[j], forward_index(j));
            count(backward_links_[j], backward_index(j));
        }
        count(labels_link_, labels_index());
        check_mpi(MPI_Allreduce(mine.data(), all.data(), int(mine.size()), MPI_UINT64_T, MPI_MAX, communicator_.get()),
                  "mpi pipeline: channel counts");
        return all;
    }

    // One hosted stage's share of the state, the records of
    // pipeline_core::transfer_stage_state (the same in every driver):
    // counts from channel_counts() when saving, unused when loading. Every
    // stage between the same two ticks (between feeds); loaded before the
    // epoch's first feed.
    template <state_archive Archive>
    void transfer_stage_state(std::size_t stage_index, Archive& archive, const std::vector<std::uint64_t>& counts)
    {
        if (!hosts(stage_index)) {
            throw std::invalid_argument("mpi pipeline: rank " + std::to_string(rank_) + " does not host stage " +
                                        std::to_string(stage_index) + ".");
        }
        if (!Archive::loading && counts.size() != 2 * stage_count + 1) {
            throw std::invalid_argument("mpi pipeline: saving a stage needs channel_counts().");
        }
        wait_until_idle();
        for_each_index<stage_count>([&](auto index) {
            constexpr std::size_t i = decltype(index)::value;
            if (i != stage_index) return;
            auto& hosted = *std::get<i>(stages_);
            std::size_t fed = fed_;
            transfer_stage_header<Cuts>(archive, i, options_, fed);
            if constexpr (Archive::loading) {
                if (hosted.worker.next_tick() != 0 || (fed_ != 0 && fed_ != fed)) {
                    throw std::runtime_error("mpi pipeline checkpoint: stage " + std::to_string(i) +
                                             " is not at the start of an epoch, or the stages' shards disagree on "
                                             "the micro-batches fed.");
                }
                fed_ = fed;
            }
            if constexpr (i + 1 == stage_count) {
                std::lock_guard lock(shared_.statistics_mutex);
                shared_.statistics.transfer_state(archive);
            }
            hosted.worker.transfer_state(archive);
            transfer_link(archive, *forward_links_[i], counts, forward_index(i));
            if constexpr (i + 1 < stage_count) transfer_link(archive, *backward_links_[i], counts, backward_index(i));
            if constexpr (i + 1 == stage_count) transfer_link(archive, *labels_link_, counts, labels_index());
            hosted.parameters.transfer_state(archive);
            if constexpr (Archive::loading) {
                if (hosted.worker.next_tick() != fed_) {
                    throw std::runtime_error("mpi pipeline checkpoint: stage " + std::to_string(i) +
                                             " is not at the tick of the micro-batches fed; the checkpoint is "
                                             "inconsistent.");
                }
            }
        });
    }

private:
    static constexpr std::size_t forward_index(std::size_t stage) { return stage; }
    static constexpr std::size_t backward_index(std::size_t stage) { return stage_count + stage; }
    static constexpr std::size_t labels_index() { return 2 * stage_count; }

    // The messages in transit into a stage: a local channel saves its own;
    // the receiving end of an MPI channel needs its sender's count.
    template <state_archive Archive, class Value>
    static void transfer_link(Archive& archive, rank_link<Value>& link, const std::vector<std::uint64_t>& counts,
                              std::size_t index)
    {
        if (link.local() != nullptr) {
            link.local()->transfer_state(archive);
        } else {
            link.remote()->transfer_state(archive, Archive::loading ? 0 : std::size_t(counts[index]));
        }
    }

    struct placement {
        std::vector<std::size_t> groups;
    };

    // Refused before anything is sent, on every rank alike.
    static placement checked_placement(MPI_Comm communicator)
    {
        const int size = detail::communicator_size(communicator);
        if (std::size_t(size) > stage_count) {
            throw std::invalid_argument("mpi pipeline: " + std::to_string(size) + " ranks for " +
                                        std::to_string(stage_count) +
                                        " stages; every rank needs at least one stage: launch at most " +
                                        std::to_string(stage_count) + " ranks.");
        }
        return {stage_groups<Network, Cuts>(std::size_t(size))};
    }

    template <std::size_t I>
    struct hosted_stage {
        slice_type<I> parameters;
        kernels::aligned_vector<T> weight_mask;
        worker_type<I> worker;

        hosted_stage(std::uint64_t seed, const typename Optimizer::options& optimizer_options,
                     const pipeline_options& options, typename worker_type<I>::links links,
                     pipeline_shared<T>& shared)
            : parameters(seed), weight_mask(slice_type<I>::weight_mask()),
              worker(parameters.values(), parameters.state(), optimizer_options, weight_mask, options, links, shared)
        {
        }
    };

    template <class Indices>
    struct hosted_tuple;
    template <std::size_t... I>
    struct hosted_tuple<std::index_sequence<I...>> {
        using type = std::tuple<std::unique_ptr<hosted_stage<I>>...>;
    };

    mpi_pipeline(placement where, MPI_Comm parent, std::uint64_t seed,
                 const typename Optimizer::options& optimizer_options, std::function<double(std::size_t)> learning_rate,
                 const pipeline_options& options)
        : communicator_(parent), rank_(detail::communicator_rank(communicator_.get())),
          ranks_(detail::communicator_size(communicator_.get())), groups_(std::move(where.groups)), options_(options),
          shared_{std::move(learning_rate), {}, {}, {}}
    {
        if (!shared_.learning_rate) throw std::invalid_argument("pipeline: a learning-rate schedule is needed.");
        if (options.batch == 0) throw std::invalid_argument("pipeline: the batch must hold at least one example.");
        int thread_level = MPI_THREAD_SINGLE;
        check_mpi(MPI_Query_thread(&thread_level), "MPI_Query_thread");
        threaded_ = end_stage() - first_stage() > 1 && thread_level == MPI_THREAD_MULTIPLE;
        make_links();
        for_each_index<stage_count>([&](auto index) {
            constexpr std::size_t i = decltype(index)::value;
            if (!hosts(i)) return;
            std::get<i>(stages_) =
                std::make_unique<hosted_stage<i>>(seed, optimizer_options, options_, links_of<i>(), shared_);
        });
        start_epoch();
        if (threaded_) start_threads();
    }

    // One std::thread per hosted stage, each running its ticks as soon as
    // feed() grants them (as thread_pipeline's do).
    void start_threads()
    {
        waiting_for_.fill(running);
        try {
            for_each_index<stage_count>([&](auto index) {
                constexpr std::size_t i = decltype(index)::value;
                if (hosts(i)) threads_.emplace_back([this] { run_stage<i>(); });
            });
        } catch (...) {
            stop_threads();
            throw;
        }
    }

    template <std::size_t I>
    void run_stage()
    {
        auto& worker = std::get<I>(stages_)->worker;
        for (std::size_t epoch = 0;; ++epoch) {
            {
                std::unique_lock lock(mutex_);
                waiting_for_[I] = 0; // the next epoch's first tick
                to_caller_.notify_all();
                to_stages_.wait(lock, [&] { return epoch_ == epoch || stopping_; });
                if (stopping_) return;
            }
            for (bool done = false; !done;) {
                {
                    std::unique_lock lock(mutex_);
                    while (worker.next_tick() >= granted_ && !stopping_) {
                        waiting_for_[I] = worker.next_tick();
                        to_caller_.notify_all();
                        to_stages_.wait(lock);
                    }
                    if (stopping_) return;
                    waiting_for_[I] = running;
                }
                const std::size_t tick = worker.next_tick();
                try {
                    done = worker.tick();
                } catch (const pipeline_stopped&) {
                    return; // the destructor, between epochs
                } catch (const std::exception& error) {
                    abort_job(I, tick, error.what());
                } catch (...) {
                    abort_job(I, tick, "an exception that is not a std::exception");
                }
            }
            std::lock_guard lock(mutex_);
            ++finished_;
            to_caller_.notify_all();
        }
    }

    // Whether every hosted stage's thread waits, with every tick granted
    // run. With mutex_ held.
    bool idle() const
    {
        for (std::size_t j = first_stage(); j < end_stage(); ++j) {
            if (waiting_for_[j] == running || waiting_for_[j] < granted_) return false;
        }
        return true;
    }

    // Until no stage of this rank runs: what a checkpoint or a read of the
    // parameters needs.
    void wait_until_idle()
    {
        if (!threaded_) return;
        std::unique_lock lock(mutex_);
        to_caller_.wait(lock, [&] { return idle(); });
    }

    void stop_threads()
    {
        if (threads_.empty()) return;
        {
            std::unique_lock lock(mutex_);
            if (!idle() && std::uncaught_exceptions() > 0) {
                lock.unlock();
                abort_rank("an exception left the mpi_pipeline's scope while its stages were running");
            }
            to_caller_.wait(lock, [&] { return idle(); });
            stopping_ = true;
        }
        stop_.stop();
        to_stages_.notify_all();
        for (std::thread& thread : threads_) thread.join();
        threads_.clear();
    }

    static std::size_t forward_values(std::size_t stage) { return Network::profile[Cuts[stage]].input_values; }
    static int forward_tag(std::size_t stage) { return int(3 * stage); }
    static int backward_tag(std::size_t stage) { return int(3 * stage + 1); }
    static constexpr int labels_tag = int(3 * stage_count + 2);
    static constexpr int evaluation_tag = int(3 * stage_count + 3);
    static constexpr int evaluation_labels_tag = int(3 * stage_count + 4);
    static constexpr int gather_tag = int(3 * stage_count + 5);
    static constexpr int fold_tag = int(3 * stage_count + 6);

    // One channel between a sending and a receiving rank: in-process when
    // both are this one, one end of an MPI channel when only one is, none
    // otherwise. Local channels wait for the other side when the stages run
    // on threads; otherwise never: this rank runs its stages in order, so a
    // message is always there when the schedule reads it.
    template <class Value>
    std::unique_ptr<rank_link<Value>> make_link(const std::string& name, int sender, int receiver, int tag,
                                                std::size_t capacity, std::size_t message_size,
                                                std::vector<std::unique_ptr<channel<Value>>>& local,
                                                std::vector<std::unique_ptr<mpi_channel<Value>>>& remote)
    {
        if (sender == rank_ && receiver == rank_) {
            local.push_back(
                std::make_unique<channel<Value>>(name, capacity, message_size, stop_,
                                                 threaded_ ? channel_waiting::blocking : channel_waiting::never));
            return std::make_unique<rank_link<Value>>(*local.back());
        }
        if (sender != rank_ && receiver != rank_) return nullptr;
        const bool sending = sender == rank_;
        remote.push_back(std::make_unique<mpi_channel<Value>>(
            name, sending ? channel_end::sending : channel_end::receiving, communicator_.get(),
            sending ? receiver : sender, tag, capacity, message_size));
        return std::make_unique<rank_link<Value>>(*remote.back());
    }

    // Two messages per data channel, as in the thread pipeline (core.hpp);
    // the labels run J - 1 ticks ahead of the last stage.
    void make_links()
    {
        forward_links_.resize(stage_count);
        backward_links_.resize(stage_count);
        for (std::size_t j = 0; j < stage_count; ++j) {
            const int sender = j == 0 ? 0 : rank_of(j - 1);
            forward_links_[j] = make_link<T>("forward into stage " + std::to_string(j), sender, rank_of(j),
                                             forward_tag(j), 2, options_.batch * forward_values(j), local_, remote_);
            if (j + 1 < stage_count) {
                backward_links_[j] =
                    make_link<T>("backward into stage " + std::to_string(j), rank_of(j + 1), rank_of(j),
                                 backward_tag(j), 2, 2 * options_.batch * forward_values(j + 1), local_, remote_);
            }
        }
        labels_link_ = make_link<std::int32_t>("labels", 0, rank_of(stage_count - 1), labels_tag,
                                               2 * stage_count + 2, options_.batch, local_labels_, remote_labels_);
    }

    template <std::size_t I>
    typename worker_type<I>::links links_of()
    {
        typename worker_type<I>::links connections;
        connections.forward_in = forward_links_[I].get();
        if constexpr (I + 1 < stage_count) {
            connections.forward_out = forward_links_[I + 1].get();
            connections.backward_in = backward_links_[I].get();
        } else {
            connections.labels = labels_link_.get();
        }
        if constexpr (I > 0) connections.backward_out = backward_links_[I - 1].get();
        return connections;
    }

    void send_micro_batch(const T* images, const std::int32_t* labels)
    {
        message<T> in = forward_links_[0]->begin_send();
        std::copy(images, images + options_.batch * Network::input::size, in.values);
        *in.header = {fed_, false};
        forward_links_[0]->end_send();
        message<std::int32_t> out = labels_link_->begin_send();
        std::copy(labels, labels + options_.batch, out.values);
        *out.header = {fed_, false};
        labels_link_->end_send();
    }

    void send_end_of_epoch()
    {
        message<T> in = forward_links_[0]->begin_send();
        *in.header = {fed_, true};
        forward_links_[0]->end_send();
    }

    void start_epoch()
    {
        fed_ = 0;
        done_.fill(false);
        for_each_hosted([](auto& hosted, std::size_t) { hosted.worker.start_epoch(); });
    }

    // Calls visit(hosted_stage<I>&, I) for every stage this rank hosts, in
    // order.
    template <class Visit>
    void for_each_hosted(Visit&& visit)
    {
        for_each_index<stage_count>([&](auto index) {
            constexpr std::size_t i = decltype(index)::value;
            if (auto& hosted = std::get<i>(stages_)) visit(*hosted, i);
        });
    }
    template <class Visit>
    void for_each_hosted(Visit&& visit) const
    {
        for_each_index<stage_count>([&](auto index) {
            constexpr std::size_t i = decltype(index)::value;
            if (const auto& hosted = std::get<i>(stages_)) visit(*hosted, i);
        });
    }

    // One tick of every hosted stage not yet done with the epoch; true once
    // all are. A stage that throws ends the job.
    bool run_tick()
    {
        bool all_done = true;
        for_each_hosted([&](auto& hosted, std::size_t j) {
            if (!done_[j]) {
                const std::size_t tick = hosted.worker.next_tick();
                try {
                    done_[j] = hosted.worker.tick();
                } catch (const std::exception& error) {
                    abort_job(j, tick, error.what());
                } catch (...) {
                    abort_job(j, tick, "an exception that is not a std::exception");
                }
            }
            all_done = all_done && done_[j];
        });
        return all_done;
    }

    // Completes the broadcast the last progress() started, if any (every
    // rank has one then).
    void finish_progress_broadcast()
    {
        if (progress_request_ == MPI_REQUEST_NULL) return;
        check_mpi(MPI_Wait(&progress_request_, MPI_STATUS_IGNORE), "mpi pipeline: progress");
        progress_seen_ = progress_sent_;
    }

    [[noreturn]] void abort_rank(const char* what) const
    {
        std::fprintf(stderr, "petra: rank %d of %d (stages %zu to %zu): %s; ending the job.\n", rank_, ranks_,
                     first_stage(), end_stage() - 1, what);
        std::fflush(stderr);
        MPI_Abort(communicator_.get(), 1);
        std::abort(); // MPI_Abort does not return
    }

    [[noreturn]] void abort_job(std::size_t stage, std::size_t tick, const char* what) const
    {
        const std::string micro_batch =
            tick >= stage ? "forwarding micro-batch " + std::to_string(tick - stage) : "before its first forward";
        std::fprintf(stderr,
                     "petra: rank %d of %d (stages %zu to %zu, blocks %zu to %zu) failed in stage %zu at tick %zu "
                     "of epoch %zu (%s): %s\n",
                     rank_, ranks_, first_stage(), end_stage() - 1, Cuts[first_stage()], Cuts[end_stage()] - 1, stage,
                     tick, epoch_ + 1, micro_batch.c_str(), what);
        std::fflush(stderr);
        MPI_Abort(communicator_.get(), 1);
        std::abort(); // MPI_Abort does not return
    }

    template <class Value>
    void broadcast_from(int root, Value& value)
    {
        static_assert(std::is_trivially_copyable_v<Value>);
        check_mpi(MPI_Bcast(&value, int(sizeof(Value)), MPI_BYTE, root, communicator_.get()), "mpi pipeline: broadcast");
    }

    detail::owned_communicator communicator_;
    int rank_;
    int ranks_;
    std::vector<std::size_t> groups_;
    pipeline_options options_;
    stop_signal stop_;
    pipeline_shared<T> shared_;
    std::vector<std::unique_ptr<channel<T>>> local_;
    std::vector<std::unique_ptr<mpi_channel<T>>> remote_;
    std::vector<std::unique_ptr<channel<std::int32_t>>> local_labels_;
    std::vector<std::unique_ptr<mpi_channel<std::int32_t>>> remote_labels_;
    std::vector<std::unique_ptr<rank_link<T>>> forward_links_;  // [j]: into stage j
    std::vector<std::unique_ptr<rank_link<T>>> backward_links_; // [j]: from stage j + 1 into stage j
    std::unique_ptr<rank_link<std::int32_t>> labels_link_;
    typename hosted_tuple<std::make_index_sequence<stage_count>>::type stages_;
    std::array<bool, stage_count> done_{}; // the caller's thread runs the stages
    std::size_t fed_ = 0;
    std::size_t epoch_ = 0;
    // progress(): the statistics in the broadcast in flight, and the last
    // ones received.
    MPI_Request progress_request_ = MPI_REQUEST_NULL;
    epoch_statistics progress_sent_;
    epoch_statistics progress_seen_;

    // The stages on threads: feed() grants ticks, drain() waits for every
    // stage to finish the epoch, a stage that waits says for which tick.
    bool threaded_ = false;
    std::mutex mutex_;
    std::condition_variable to_stages_;
    std::condition_variable to_caller_;
    std::size_t granted_ = 0;  // ticks the stages may run this epoch
    std::size_t finished_ = 0; // stages done with the epoch
    bool stopping_ = false;
    static constexpr std::size_t running = std::numeric_limits<std::size_t>::max();
    std::array<std::size_t, stage_count> waiting_for_{}; // the tick each stage's thread waits for, or running
    std::vector<std::thread> threads_;
};

template <class Network, auto Cuts, class Optimizer, class T>
inference_score mpi_pipeline<Network, Cuts, Optimizer, T>::evaluate(const T* images, const std::int32_t* labels,
                                                                    std::size_t count, std::size_t chunk)
{
    if (chunk == 0) throw std::invalid_argument("mpi pipeline: evaluation needs a chunk of at least one example.");
    wait_until_idle();
    if (feeds() && count > 0 && (images == nullptr || labels == nullptr)) {
        throw std::invalid_argument("mpi pipeline: the rank that feeds needs the images and labels to evaluate.");
    }
    const MPI_Comm communicator = communicator_.get();
    const int last_rank = rank_of(stage_count - 1);
    // The labels go to the scoring rank at once, in one message.
    std::vector<std::int32_t> scored_labels;
    MPI_Request labels_sent = MPI_REQUEST_NULL;
    if (feeds() && last_rank != rank_) {
        check_mpi(MPI_Isend(labels, int(count), MPI_INT32_T, last_rank, evaluation_labels_tag, communicator,
                            &labels_sent),
                  "mpi pipeline: evaluation labels");
    }
    if (scores()) {
        if (feeds()) {
            scored_labels.assign(labels, labels + count);
        } else {
            scored_labels.resize(count);
            check_mpi(MPI_Recv(scored_labels.data(), int(count), MPI_INT32_T, 0, evaluation_labels_tag, communicator,
                               MPI_STATUS_IGNORE),
                      "mpi pipeline: evaluation labels");
        }
    }
    // Two buffers, each as large as any activation this rank's stages take
    // or give for a chunk.
    std::size_t largest = 0;
    for (std::size_t j = first_stage(); j < end_stage(); ++j) {
        largest = std::max({largest, Network::profile[Cuts[j]].input_values,
                            Network::profile[Cuts[j + 1] - 1].output_values});
    }
    kernels::aligned_vector<T> in(chunk * largest), out(chunk * largest);
    inference_score score;
    score.examples = count;
    using loss = typename softmax_cross_entropy_loss<Network::output::size>::template bind<
        shape<Network::output::size>>;
    for (std::size_t first = 0; first < count; first += chunk) {
        const std::size_t size = std::min(chunk, count - first);
        const T* input = nullptr;
        if (feeds()) {
            input = images + first * Network::input::size;
        } else {
            check_mpi(MPI_Recv(in.data(), int(size * forward_values(first_stage())), mpi_type<T>(), rank_ - 1,
                               evaluation_tag, communicator, MPI_STATUS_IGNORE),
                      "mpi pipeline: evaluation");
            input = in.data();
        }
        for_each_hosted([&](auto& hosted, std::size_t) {
            using stage_t = std::remove_cvref_t<decltype(hosted.worker.stage())>;
            hosted.worker.stage().infer(batch_view<const T, typename stage_t::input>(input, size),
                                        batch_view<T, typename stage_t::output>(out.data(), size));
            std::swap(in, out);
            input = in.data();
        });
        if (scores()) {
            const std::int32_t* chunk_labels = scored_labels.data() + first;
            score.loss_sum += double(loss::evaluate(size, input, chunk_labels, nullptr)) * double(size);
            score.correct += loss::correct(size, input, chunk_labels);
        } else {
            check_mpi(MPI_Send(input, int(size * forward_values(end_stage())), mpi_type<T>(), rank_ + 1,
                               evaluation_tag, communicator),
                      "mpi pipeline: evaluation");
        }
    }
    check_mpi(MPI_Wait(&labels_sent, MPI_STATUS_IGNORE), "mpi pipeline: evaluation labels");
    broadcast_from(last_rank, score);
    return score;
}

template <class Network, auto Cuts, class Optimizer, class T>
void mpi_pipeline<Network, Cuts, Optimizer, T>::gather_parameters(network_parameters<Network, T>* whole, int root)
{
    if (rank_ == root && whole == nullptr) {
        throw std::invalid_argument("mpi pipeline: gather_parameters needs the parameters to fill on its root.");
    }
    wait_until_idle();
    const MPI_Datatype type = mpi_type<T>();
    const MPI_Comm communicator = communicator_.get();
    for_each_hosted([&](auto& hosted, std::size_t) {
        if (rank_ == root) {
            hosted.parameters.copy_into(*whole);
            return;
        }
        const auto values = hosted.parameters.values();
        const auto state = hosted.parameters.state();
        check_mpi(MPI_Send(values.data(), int(values.size()), type, root, gather_tag, communicator), "gather");
        check_mpi(MPI_Send(state.data(), int(state.size()), type, root, gather_tag, communicator), "gather");
    });
    if (rank_ != root) return;
    for (std::size_t j = 0; j < stage_count; ++j) {
        if (hosts(j)) continue;
        const std::size_t values = Network::parameter_offsets[Cuts[j]], values_end = Network::parameter_offsets[Cuts[j + 1]];
        const std::size_t state = Network::state_offsets[Cuts[j]], state_end = Network::state_offsets[Cuts[j + 1]];
        check_mpi(MPI_Recv(whole->values().data() + values, int(values_end - values), type, rank_of(j), gather_tag,
                           communicator, MPI_STATUS_IGNORE),
                  "gather");
        check_mpi(MPI_Recv(whole->state().data() + state, int(state_end - state), type, rank_of(j), gather_tag,
                           communicator, MPI_STATUS_IGNORE),
                  "gather");
    }
}

template <class Network, auto Cuts, class Optimizer, class T>
template <class Fold>
std::uint64_t mpi_pipeline<Network, Cuts, Optimizer, T>::fold_stages(std::uint64_t state, Fold&& fold)
{
    wait_until_idle();
    const MPI_Comm communicator = communicator_.get();
    if (rank_ > 0) {
        check_mpi(MPI_Recv(&state, 1, MPI_UINT64_T, rank_ - 1, fold_tag, communicator, MPI_STATUS_IGNORE), "fold");
    }
    for_each_hosted([&](auto& hosted, std::size_t j) {
        state = fold(state, j, std::span<const T>(hosted.parameters.values()),
                     std::span<const T>(hosted.parameters.state()));
    });
    if (rank_ + 1 < ranks_) check_mpi(MPI_Send(&state, 1, MPI_UINT64_T, rank_ + 1, fold_tag, communicator), "fold");
    broadcast_from(ranks_ - 1, state);
    return state;
}

template <class Network, auto Cuts, class Optimizer, class T>
std::size_t mpi_pipeline<Network, Cuts, Optimizer, T>::memory_bytes() const
{
    std::size_t bytes = 0;
    for_each_hosted([&](const auto& hosted, std::size_t) {
        bytes += hosted.parameters.memory_bytes() + hosted.weight_mask.size() * sizeof(T) +
                 hosted.worker.memory_bytes();
    });
    for (const auto& channel : local_) bytes += channel->memory_bytes();
    for (const auto& channel : remote_) bytes += channel->memory_bytes();
    for (const auto& channel : local_labels_) bytes += channel->memory_bytes();
    for (const auto& channel : remote_labels_) bytes += channel->memory_bytes();
    return bytes;
}

} // namespace petra
