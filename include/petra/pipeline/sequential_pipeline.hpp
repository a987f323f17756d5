// The sequential simulator (floor 7): every stage's ticks on the caller's
// thread, in order of ticks, then of stages. It computes what
// thread_pipeline computes, bit for bit, and serves as its reference.
//
// With options.replicas = D > 1 it also runs D copies of the pipeline
// (pipeline/replicas.hpp), the reference of replicas on MPI ranks: the
// caller's parameters are replica 0's, the others' are copies. Each tick
// runs, stage by stage, the first half of the stage's tick in every
// replica, sums the stage's gradients over the replicas in replica order
// if the tick ends with a step, then the second half (the step) in every
// replica. feed() takes the global micro-batch; drain() returns the
// statistics of all replicas and averages their running statistics;
// progress(), pause() and set_trace() see replica 0. Checkpoints of
// replicas are written and read on MPI ranks (mpi/checkpoint.hpp): here
// they are refused.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include <petra/batch_view.hpp>
#include <petra/error.hpp>
#include <petra/network.hpp>
#include <petra/pipeline/core.hpp>
#include <petra/pipeline/options.hpp>
#include <petra/pipeline/replicas.hpp>
#include <petra/pipeline/stage_threads.hpp>
#include <petra/pipeline/worker.hpp>
#include <petra/state_archive.hpp>
#include <petra/tensor_batch.hpp>

namespace petra {

// feed() runs one tick of every stage; drain() runs the ticks that empty the
// pipeline; pause() returns a guard through which the parameters are read,
// as from thread_pipeline. Channels never wait: a message missing where the
// schedule expects one is a std::logic_error. After an exception the
// pipeline is unusable: later calls rethrow it. Without exceptions, an error
// calls the error handler (error.hpp), which ends the program.
template <class Network, auto Cuts, class Optimizer, class T = float>
class sequential_pipeline : public pipeline_core<Network, Cuts, Optimizer, T>,
                            public feed_forms<sequential_pipeline<Network, Cuts, Optimizer, T>, Network, T> {
    using core = pipeline_core<Network, Cuts, Optimizer, T>;
    using forms = feed_forms<sequential_pipeline<Network, Cuts, Optimizer, T>, Network, T>;

public:
    sequential_pipeline(network_parameters_view<Network, T> parameters,
                        const typename Optimizer::options& optimizer_options,
                        std::function<double(std::size_t)> learning_rate, const pipeline_options& options)
        : core(parameters, optimizer_options, learning_rate, options, channel_waiting::never), parameters_(parameters)
    {
        for (std::size_t d = 1; d < checked_replicas(options); ++d) {
            replicas_.push_back(std::make_unique<replica>(parameters, optimizer_options, learning_rate, options));
        }
        core::start_epoch();
    }

    // The other forms: pointers, or tensors (feed_forms, core.hpp).
    using forms::feed;

    // One micro-batch: options().batch images and as many labels (with
    // replicas the global micro-batch, replica d taking examples
    // [d x batch, (d + 1) x batch)); one tick of every stage.
    void feed(const_batch<T, typename Network::input> images, std::span<const std::int32_t> labels)
    {
        detail::check_micro_batch(global_batch(core::options()), images.batch(), labels.size());
        core::refuse_while_paused("feed()");
        const std::size_t batch = core::options().batch;
        guarded([&] {
            for_each_replica([&](auto& pipeline, std::size_t d) {
                pipeline.send_micro_batch(
                    const_batch<T, typename Network::input>(images.data() + d * batch * Network::input::size, batch),
                    labels.subspan(d * batch, batch));
            });
            run_tick();
        });
    }

    // Between feeds every stage has finished the same tick: the guard only
    // holds feed() and drain() back while it lives (paused_pipeline.hpp).
    // Rethrows a stage's failure.
    [[nodiscard("the guard releases the pipeline when it goes: hold it in a variable")]] typename core::paused pause()
    {
#if PETRA_EXCEPTIONS
        if (failure_) std::rethrow_exception(failure_);
#endif
        return core::hold_paused();
    }

    // Saves (a writing archive) or restores (a reading one) the whole
    // in-flight state: between feeds, every stage has finished the same
    // tick, so the state is complete. Restoring needs a pipeline of the same
    // network, cuts and options that has not been fed this epoch; it then
    // goes on exactly as the saved one would have (the saved one goes on
    // too). The parameters are the caller's to save.
    template <state_archive Archive>
    void transfer_state(Archive& archive)
    {
        guarded([&] {
            refuse_replicas_checkpoint();
            if constexpr (Archive::loading) {
                if (!core::at_epoch_start()) {
                    raise_error(error_kind::logic_error,
                                "pipeline: a checkpoint can only be loaded before the epoch's first feed.");
                }
            }
            core::transfer_pipeline_state(archive);
        });
    }

    // The same for one stage (core.hpp: its share of the state and its
    // slice of the parameters), for checkpoints of one file per stage; a
    // pipeline is restored by loading every stage's, before the epoch's
    // first feed.
    template <state_archive Archive>
    void transfer_stage_state(std::size_t stage, Archive& archive)
    {
        guarded([&] {
            refuse_replicas_checkpoint();
            core::transfer_stage_state(stage, archive);
        });
    }

    // Ends the epoch: runs ticks until every stage has differentiated every
    // micro-batch fed, and returns the epoch's statistics.
    epoch_statistics drain()
    {
        core::refuse_while_paused("drain()");
        epoch_statistics epoch;
        guarded([&] {
            for_each_replica([](auto& pipeline, std::size_t) { pipeline.send_end_of_epoch(); });
            while (!run_tick()) {
            }
            epoch = combine_replica_statistics(replica_count(), [&](std::size_t d) {
                return d == 0 ? core::shared_.take_statistics() : replicas_[d - 1]->pipeline.shared_.take_statistics();
            });
            if (replica_count() > 1) average_running_statistics();
            for_each_replica([](auto& pipeline, std::size_t) { pipeline.start_epoch(); });
            ticks_.start_epoch();
            replica_done_ = {};
        });
        return epoch;
    }

private:
    // A copy of the pipeline for replica d > 0, over its own copy of the
    // parameters, whose feeding and state the simulator reaches.
    class replica_core : public core {
    public:
        replica_core(network_parameters_view<Network, T> parameters,
                     const typename Optimizer::options& optimizer_options,
                     std::function<double(std::size_t)> learning_rate, const pipeline_options& options)
            : core(parameters, optimizer_options, std::move(learning_rate), options, channel_waiting::never)
        {}
        using core::send_end_of_epoch, core::send_micro_batch, core::shared_, core::start_epoch;
    };
    struct replica {
        kernels::aligned_vector<T> values;
        kernels::aligned_vector<T> state;
        replica_core pipeline;

        replica(network_parameters_view<Network, T> source, const typename Optimizer::options& optimizer_options,
                std::function<double(std::size_t)> learning_rate, const pipeline_options& options)
            : values(source.values().begin(), source.values().end()),
              state(source.state().begin(), source.state().end()),
              pipeline(network_parameters_view<Network, T>(
                           std::span<T, Network::parameter_count>(values.data(), Network::parameter_count),
                           std::span<T, Network::state_count>(state.data(), Network::state_count)),
                       optimizer_options, std::move(learning_rate), options)
        {}
    };

    std::size_t replica_count() const { return replicas_.size() + 1; }

    // Calls visit(pipeline, d) for every replica d in order, replica 0
    // (this pipeline's own core) first.
    template <class Visit>
    void for_each_replica(Visit&& visit)
    {
        visit(*this, std::size_t(0));
        for (std::size_t d = 1; d < replica_count(); ++d) visit(replicas_[d - 1]->pipeline, d);
    }

    template <std::size_t I>
    typename core::template worker_type<I>& worker_of(std::size_t d)
    {
        return d == 0 ? core::template worker<I>() : replicas_[d - 1]->pipeline.template worker<I>();
    }

    // One tick of every stage not yet done; true once all are. With
    // replicas, each stage's tick in halves around the sum of its gradients
    // (see the top of the file).
    bool run_tick()
    {
        if (replicas_.empty()) return ticks_.tick([this](auto&& visit) { this->for_each_worker(visit); });
        bool all_done = true;
        for_each_index<core::stage_count>([&](auto index) {
            constexpr std::size_t i = decltype(index)::value;
            if (replica_done_[i]) return;
            for (std::size_t d = 0; d < replica_count(); ++d) worker_of<i>(d).begin_tick();
            if (worker_of<i>(0).step_due()) sum_gradients<i>();
            for (std::size_t d = 0; d < replica_count(); ++d) replica_done_[i] = worker_of<i>(d).end_tick();
            all_done = all_done && replica_done_[i];
        });
        return all_done;
    }

    // Stage I's gradient sum, in every replica, replaced by the sum over
    // the replicas.
    template <std::size_t I>
    void sum_gradients()
    {
        const auto gradient_of = [&](std::size_t d) { return std::span<T>(worker_of<I>(d).stage().gradient()); };
        const std::span<T> sum = gradient_of(0);
        add_in_replica_order(replica_count(), gradient_of, sum);
        for (std::size_t d = 1; d < replica_count(); ++d) std::copy(sum.begin(), sum.end(), gradient_of(d).begin());
    }

    // Every replica's running statistics replaced by their average.
    void average_running_statistics()
    {
        const auto state_of = [&](std::size_t d) {
            return d == 0 ? std::span<T>(parameters_.state()) : std::span<T>(replicas_[d - 1]->state);
        };
        const std::span<T> average = state_of(0);
        average_in_replica_order(replica_count(), state_of, average);
        for (std::size_t d = 1; d < replica_count(); ++d)
            std::copy(average.begin(), average.end(), state_of(d).begin());
    }

    void refuse_replicas_checkpoint() const
    {
        if (replica_count() > 1) {
            raise_error(error_kind::logic_error, "sequential pipeline: a pipeline with replicas is checkpointed on "
                                                 "MPI ranks (mpi/checkpoint.hpp), not on the simulator.");
        }
    }

    // A stage that threw left its FIFOs and counters mid-tick: from then on
    // every call reports that first failure instead of computing on them.
    // (Without exceptions a failure ends in the error handler, which does not
    // return.)
    template <class Operation>
    void guarded(Operation&& operation)
    {
#if PETRA_EXCEPTIONS
        if (failure_) std::rethrow_exception(failure_);
        try {
            operation();
        } catch (...) {
            failure_ = std::current_exception();
            throw;
        }
#else
        operation();
#endif
    }

    network_parameters_view<Network, T> parameters_; // replica 0's: the caller's
    std::vector<std::unique_ptr<replica>> replicas_; // replicas 1 .. D - 1
    caller_ticks<core::stage_count> ticks_;
    std::array<bool, core::stage_count> replica_done_{}; // with replicas: the stages done with the epoch
#if PETRA_EXCEPTIONS
    std::exception_ptr failure_;
#endif
};

} // namespace petra
