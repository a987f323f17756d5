// PETRA's pipeline over MPI ranks (for code that links MPI; petra::petra
// does not need it): the J stages of a network cut at Cuts, spread over the
// R ranks of a communicator, R <= J; with options.replicas = D, D copies
// of it over D x R ranks (replicas.hpp), each fed its shard of the global
// micro-batch. Every rank runs the same program:
//
//   petra::mpi_session mpi(argc, argv);
//   mpi_pipeline<net, cuts, sgd<float>> pipeline(MPI_COMM_WORLD, /*seed=*/1, sgd_options{}, schedule,
//                                                {.batch = 64});
//   for (each micro-batch) pipeline.feed(images, labels);  // read only on the rank that feeds
//   epoch_statistics epoch = pipeline.drain();              // the same on every rank
//
// Only MPI's part lives here and beside it: where the stages run
// (placement.hpp: groups of stages on ranks, the transports between them),
// the collective calls (collectives.hpp) and the job's end on a stage's
// failure. The schedule is the pipeline core's (pipeline/): the same
// workers, link plan, ticks (caller_ticks on a rank hosting one stage,
// stage_threads on one hosting several, given MPI_THREAD_MULTIPLE) and
// checkpoint records as the simulator and the threads. Each rank allocates
// only its own stages' parameters (parameter_slice, initialised as
// make_parameters(seed) would), optimizer state, buffers and the channels
// at its edges. Ranks wait for one another only through their messages,
// and every tick reads what its neighbours produced at the tick before,
// so the numbers are those of sequential_pipeline, bit for bit.
//
// Collective calls (every rank of the communicator, in the same order):
// the constructor, feed(), drain(), progress(), evaluate(),
// gather_parameters(), fold_stages(), channel_counts() and the checkpoint
// calls; with replicas, progress() and the calls after it are collective
// over the rank's replica and concern it alone. pause() is not: it waits
// for this rank's stages alone.
//
// Failures: errors of the caller's (arguments, calls out of order) and of
// MPI calls are reported through raise_error (error.hpp), on the ranks
// that meet them. A failure inside a stage cannot be carried to the
// caller: its neighbours wait for messages it will never send, so the rank
// prints one line naming itself, its stages, the tick and the micro-batch,
// then calls MPI_Abort with status 1.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <petra/batch_view.hpp>
#include <petra/error.hpp>
#include <petra/kernels/simd.hpp>
#include <petra/mpi/channel.hpp>
#include <petra/mpi/placement.hpp>
#include <petra/mpi/rank_link.hpp>
#include <petra/mpi/replicas.hpp>
#include <petra/network.hpp>
#include <petra/parameter_slice.hpp>
#include <petra/pipeline/core.hpp>
#include <petra/pipeline/links.hpp>
#include <petra/pipeline/options.hpp>
#include <petra/pipeline/paused_pipeline.hpp>
#include <petra/pipeline/stage.hpp>
#include <petra/pipeline/stage_threads.hpp>
#include <petra/pipeline/worker.hpp>
#include <petra/state_archive.hpp>
#include <petra/type_list.hpp>

namespace petra {

// A score of a forward-only pass: examples, how many were classified right,
// and the sum over the examples of their loss.
struct inference_score {
    std::size_t examples = 0;
    std::size_t correct = 0;
    double loss_sum = 0;

    double mean_loss() const { return examples == 0 ? 0.0 : loss_sum / double(examples); }
    double accuracy() const { return examples == 0 ? 0.0 : double(correct) / double(examples); }
};

template <class Network, auto Cuts, class Optimizer, class T = float>
class mpi_pipeline : public replica_group<T>,
                     public rank_placement<Network, Cuts, T>,
                     public feed_forms<mpi_pipeline<Network, Cuts, Optimizer, T>, Network, T> {
    using replica_base = replica_group<T>;
    using placement = rank_placement<Network, Cuts, T>;
    using forms = feed_forms<mpi_pipeline<Network, Cuts, Optimizer, T>, Network, T>;
    using layout = pipeline_layout<Network, Cuts, T>;
    using placement::backward_links_, placement::communicator_, placement::forward_links_, placement::labels_link_,
        placement::rank_, placement::ranks_;

public:
    using placement::end_stage, placement::feeds, placement::first_stage, placement::hosts, placement::rank_of,
        placement::scores, replica_base::replica, replica_base::replicas;
    static constexpr std::size_t stage_count = Cuts.size() - 1;
    static_assert(valid_cuts<Network>(Cuts),
                  "The cuts must run from 0 to the network's block count, every stage holding at least one block.");
    // What pause() returns: this rank's stages, each on its own.
    using paused = paused_stages<Network, Cuts, T>;

    template <std::size_t I>
    using hosted_stage = petra::hosted_stage<Network, Cuts, Optimizer, T, I>;
    template <std::size_t I>
    using worker_type = typename hosted_stage<I>::worker_type;

    // Collective. Each rank builds its own stages, their parameters drawn
    // as Network::make_parameters<T>(seed) draws them. More ranks than
    // stages in a replica, or a rank count that the replicas do not divide,
    // are refused (invalid_argument) on every rank alike, before any message.
    mpi_pipeline(MPI_Comm communicator, std::uint64_t seed, const typename Optimizer::options& optimizer_options,
                 std::function<double(std::size_t)> learning_rate, const pipeline_options& options)
        : replica_base(communicator, options.replicas), placement(replica_base::pipeline_communicator()),
          options_(options), shared_{.learning_rate = std::move(learning_rate)}
    {
        if (!shared_.learning_rate) {
            raise_error(error_kind::invalid_argument, "pipeline: a learning-rate schedule is needed.");
        }
        int thread_level = MPI_THREAD_SINGLE;
        check_mpi(MPI_Query_thread(&thread_level), "MPI_Query_thread");
        threaded_ = end_stage() - first_stage() > 1 && thread_level == MPI_THREAD_MULTIPLE;
        placement::make_links(options_.batch, stop_, threaded_);
        for_each_index<stage_count>([&](auto index) {
            constexpr std::size_t i = decltype(index)::value;
            if (!hosts(i)) return;
            std::get<i>(stages_) =
                std::make_unique<hosted_stage<i>>(seed, optimizer_options, options_,
                                                  stage_links<typename worker_type<i>::links, i, stage_count>(
                                                      forward_links_, backward_links_, labels_link_.get()),
                                                  shared_);
        });
        replica_base::connect_stages(
            stage_count, [&](std::size_t j) { return hosts(j); },
            [](std::size_t j) {
                return std::max(Network::parameter_offsets[Cuts[j + 1]] - Network::parameter_offsets[Cuts[j]],
                                Network::state_offsets[Cuts[j + 1]] - Network::state_offsets[Cuts[j]]);
            });
        replica_base::share_sums(shared_, [](std::size_t j) {
            return Network::parameter_offsets[Cuts[j + 1]] - Network::parameter_offsets[Cuts[j]];
        });
        start_epoch();
        if (threaded_) {
            for_each_hosted([&](auto& hosted, std::size_t j) {
                threads_.start(hosted.worker, j, placement::abort_on_failure(epoch_));
            });
        }
    }
    mpi_pipeline(const mpi_pipeline&) = delete;
    mpi_pipeline& operator=(const mpi_pipeline&) = delete;

    // Between epochs, or where every rank stopped feeding at the same
    // micro-batch (the stages finish the ticks granted, then the threads
    // are joined). An exception leaving the pipeline's scope while this
    // rank's stage threads still run ends the job: they cannot be stopped
    // inside MPI.
    ~mpi_pipeline()
    {
        if (threaded_ && !threads_.is_resting() && std::uncaught_exceptions() > 0) {
            placement::abort_rank("an exception left the mpi_pipeline's scope while its stages were running");
        }
        wait_until_idle();
        finish_progress_broadcast();
    }

    // Whether this rank runs its stages on one thread each, or on the
    // caller's thread inside feed().
    bool threaded() const { return threaded_; }
    const pipeline_options& options() const { return options_; }

    // Observes every forward, backward and step of this rank's stages.
    void set_trace(std::function<void(const pipeline_event<T>&)> trace) { shared_.trace = std::move(trace); }

    // The other forms: pointers, or tensors (feed_forms, pipeline/core.hpp).
    using forms::feed;

    // Collective: one micro-batch of options().batch images and as many
    // labels (with replicas the global micro-batch, of which the replica
    // reads its shard), read on the rank that feeds (the others pass none:
    // feed()), then one tick of every stage this rank hosts: run before
    // feed() returns, or granted to the stages' threads.
    void feed(const_batch<T, typename Network::input> images, std::span<const std::int32_t> labels)
    {
        gate_.refuse_while_paused("feed()");
        if (feeds()) {
            if (!images || labels.data() == nullptr) {
                raise_error(error_kind::invalid_argument,
                            "mpi pipeline: the rank that feeds needs the images and labels.");
            }
            detail::check_micro_batch(global_batch(options_), images.batch(), labels.size());
            const std::size_t batch = options_.batch, first = replica() * batch;
            send_micro_batch<T>(
                *forward_links_[0], *labels_link_,
                const_batch<T, typename Network::input>(images.data() + first * Network::input::size, batch),
                labels.subspan(first, batch), fed_);
        }
        ++fed_;
        if (threaded_) threads_.grant(fed_);
        else run_tick();
    }
    // On a rank that does not feed: the tick, without data.
    void feed() { feed(const_batch<T, typename Network::input>(), {}); }

    // Collective: ends the epoch (every micro-batch fed differentiated by
    // every stage, a last partial accumulation applied) and returns its
    // statistics, the same on every rank: with replicas, those of all
    // replicas, whose running statistics are then averaged (replicas.hpp).
    epoch_statistics drain()
    {
        gate_.refuse_while_paused("drain()");
        if (feeds()) send_end_of_epoch<T>(*forward_links_[0], fed_);
        if (threaded_) {
            threads_.finish_epoch();
        } else {
            while (!run_tick()) {
            }
        }
        epoch_statistics epoch = shared_.take_statistics();
        finish_progress_broadcast();
        progress_seen_ = {};
        if (replicas() > 1) {
            if (scores()) epoch = replica_base::combine_statistics(stage_count - 1, epoch);
            for_each_hosted([&](auto& hosted, std::size_t j) {
                replica_base::average_across_replicas(j, std::span<T>(hosted.parameters.state()));
            });
        }
        broadcast_from(rank_of(stage_count - 1), epoch);
        ++epoch_;
        start_epoch(); // every stage's thread waits for the next epoch: none touches its worker
        if (threaded_) threads_.begin_next_epoch();
        return epoch;
    }

    // Collective, when called at all (every rank, after each feed): the
    // current epoch's statistics so far. The rank that scores returns its
    // own once its stages have run the tick of the last feed; the others
    // those it had at the call before, broadcast without waiting (a
    // nonblocking broadcast started at each call and completed at the
    // next), so that rank 0 reports progress as the thread pipeline does,
    // a micro-batch late.
    epoch_statistics progress();

    // Not collective: waits until this rank's stages have run every tick of
    // the micro-batches fed, and returns a guard through which their
    // parameters, running statistics and gradient sums are read
    // (paused_pipeline.hpp; empty for the stages of other ranks). While it
    // lives feed() and drain() refuse to run.
    [[nodiscard("the guard releases the pipeline when it goes: hold it in a variable")]] paused pause()
    {
        wait_until_idle();
        typename paused::stage_spans parameters{}, state{}, sums{};
        for_each_hosted([&](auto& hosted, std::size_t j) {
            parameters[j] = hosted.parameters.values();
            state[j] = hosted.parameters.state();
            sums[j] = hosted.worker.stage().gradient();
        });
        return gate_.template hold_stages<Network, Cuts, T>(parameters, state, sums);
    }

    // Collective: a forward-only pass (running statistics, nothing updated)
    // of `count` images through the ranks, `chunk` at a time, scored against
    // their labels; images and labels are read on the rank that feeds. The
    // score, the same on every rank, sums each chunk's mean loss times its
    // size, in order. With replicas, replica 0 evaluates (between epochs
    // the replicas hold the same network) and every rank gets its score.
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
    // optimizer state, FIFOs, buffers, replica exchange, and its channels.
    std::size_t memory_bytes() const;

    // Collective, before this rank saves its stages: how many messages the
    // sending end of every channel between two ranks has sent (indexed as
    // links.hpp numbers them), which the receiving ends need to save what
    // is in transit.
    std::vector<std::uint64_t> channel_counts();

    // One hosted stage's share of the state, the records of
    // pipeline_core::transfer_stage_state (the same in every placement):
    // counts from channel_counts() when saving, unused when loading. Every
    // stage between the same two ticks (between feeds); loaded before the
    // epoch's first feed.
    template <state_archive Archive>
    void transfer_stage_state(std::size_t stage_index, Archive& archive, const std::vector<std::uint64_t>& counts)
    {
        if (!hosts(stage_index)) {
            raise_error(error_kind::invalid_argument, "mpi pipeline: rank " + std::to_string(rank_) +
                                                          " does not host stage " + std::to_string(stage_index) + ".");
        }
        if (!Archive::loading && counts.size() != link_count(stage_count)) {
            raise_error(error_kind::invalid_argument, "mpi pipeline: saving a stage needs channel_counts().");
        }
        if (replicas() > 1 && fed_ != 0) {
            raise_error(error_kind::logic_error, "mpi pipeline: a pipeline with replicas is saved between epochs, "
                                                 "where replica 0's stages hold the state of every replica.");
        }
        wait_until_idle();
        threads_.while_held([&] {
            const auto worker_of = [&](auto i) -> auto& { return std::get<decltype(i)::value>(stages_)->worker; };
            transfer_stage_records<Cuts>(
                stage_index, archive, options_, fed_, shared_, worker_of,
                [&](auto& link, std::size_t index) { placement::transfer_link(archive, link, counts, index); },
                [&](auto index) { std::get<decltype(index)::value>(stages_)->parameters.transfer_state(archive); });
        });
    }

private:
    inference_score evaluate_replica(const T* images, const std::int32_t* labels, std::size_t count, std::size_t chunk);

    void start_epoch()
    {
        fed_ = 0;
        ticks_.start_epoch();
        for_each_hosted([](auto& hosted, std::size_t) { hosted.worker.start_epoch(); });
    }

    // Calls visit(hosted_stage<I>&, I) for every stage this rank hosts, in
    // order.
    template <class Visit>
    void for_each_hosted(Visit&& visit) const
    {
        for_each_index<stage_count>([&](auto index) {
            if (auto& hosted = std::get<decltype(index)::value>(stages_)) visit(*hosted, index());
        });
    }

    // One tick of every hosted stage not yet done with the epoch, on the
    // caller's thread; true once all are.
    bool run_tick()
    {
        return ticks_.tick(
            [&](auto&& visit) { for_each_hosted([&](auto& hosted, std::size_t j) { visit(hosted.worker, j); }); },
            placement::abort_on_failure(epoch_));
    }

    // Until no stage of this rank runs: what a checkpoint or a read of the
    // parameters needs.
    void wait_until_idle()
    {
        if (threaded_) threads_.wait_until_resting();
    }

    // Completes the broadcast the last progress() started, if any (every
    // rank has one then).
    void finish_progress_broadcast()
    {
        if (progress_request_ == MPI_REQUEST_NULL) return;
        check_mpi(MPI_Wait(&progress_request_, MPI_STATUS_IGNORE), "mpi pipeline: progress");
        progress_seen_ = progress_sent_;
    }

    template <class Value>
    void broadcast_from(int root, Value& value)
    {
        static_assert(std::is_trivially_copyable_v<Value>);
        check_mpi(MPI_Bcast(&value, int(sizeof(Value)), MPI_BYTE, root, communicator_.get()),
                  "mpi pipeline: broadcast");
    }

    pipeline_options options_;
    stop_signal stop_;
    pipeline_shared<T> shared_;
    typename hosted_stages<Network, Cuts, Optimizer, T>::type stages_;
    bool threaded_ = false;
    caller_ticks<stage_count> ticks_; // the stages on the caller's thread
    std::size_t fed_ = 0;
    std::size_t epoch_ = 0;
    pause_gate gate_;
    // progress(): the statistics in the broadcast in flight, and the last
    // ones received.
    MPI_Request progress_request_ = MPI_REQUEST_NULL;
    epoch_statistics progress_sent_;
    epoch_statistics progress_seen_;
    // Last, so that its destructor stops and joins the threads before the
    // stages and channels they use go.
    stage_threads<stage_count> threads_{stop_};
};

} // namespace petra

#include <petra/mpi/collectives.hpp>
