// The threaded driver (floor 7): one std::thread per stage, each running
// its stage's ticks as soon as the schedule allows, gated by the micro-batches
// fed so that all can be paused at the same tick. It computes what
// sequential_pipeline computes, bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <utility>

#include <petra/batch_view.hpp>
#include <petra/error.hpp>
#include <petra/network.hpp>
#include <petra/pipeline/channel.hpp>
#include <petra/pipeline/core.hpp>
#include <petra/pipeline/options.hpp>
#include <petra/pipeline/stage_threads.hpp>
#include <petra/pipeline/worker.hpp>
#include <petra/state_archive.hpp>
#include <petra/tensor_batch.hpp>

namespace petra {

// The threads are started once and reused across epochs. feed() blocks while
// the first stage's channel is full; drain() waits for every stage to finish
// the epoch; pause() waits for every stage to finish the ticks of the
// micro-batches fed and returns a guard through which the parameters are
// read (paused_pipeline.hpp). An exception in any stage stops every stage,
// and the next (or current) feed(), drain() or pause() rethrows it; a
// failure after the last feed() is reported only by drain() or pause(), so
// end every epoch with drain(). The destructor stops and joins every thread;
// it never hangs and never throws.
//
// Without exceptions (error.hpp), a failure in a stage calls the error
// handler on that stage's thread, and the handler ends the program: there
// is nothing to carry to the caller. The destructor then lets every stage
// finish the ticks it was granted (the micro-batches fed), since a stage
// waiting for a neighbour's message cannot be woken out of its tick without
// an exception, and joins them.
template <class Network, auto Cuts, class Optimizer, class T = float>
class thread_pipeline : public pipeline_core<Network, Cuts, Optimizer, T>,
                        public feed_forms<thread_pipeline<Network, Cuts, Optimizer, T>, Network, T> {
    using core = pipeline_core<Network, Cuts, Optimizer, T>;
    using forms = feed_forms<thread_pipeline<Network, Cuts, Optimizer, T>, Network, T>;

public:
    thread_pipeline(network_parameters_view<Network, T> parameters,
                    const typename Optimizer::options& optimizer_options,
                    std::function<double(std::size_t)> learning_rate, const pipeline_options& options)
        : core(parameters, optimizer_options, std::move(learning_rate), options, channel_waiting::blocking)
    {
        if (options.replicas != 1) {
            raise_error(error_kind::invalid_argument,
                        "thread pipeline: it runs one copy of the pipeline; replicas run on the simulator or on MPI "
                        "ranks.");
        }
        core::start_epoch();
        // A thread that cannot start throws: threads_'s destructor stops and
        // joins those that did.
        core::for_each_worker([&](auto& worker, std::size_t j) { threads_.start(worker, j); });
    }

    thread_pipeline(const thread_pipeline&) = delete;
    thread_pipeline& operator=(const thread_pipeline&) = delete;

    // The other forms: pointers, or tensors (feed_forms, core.hpp).
    using forms::feed;

    // One micro-batch: options().batch images and as many labels.
    //
    // A stage runs tick t of an epoch only once micro-batch t has been fed
    // (or the epoch's end announced), so that the stages can be stopped all
    // at the same tick (pause). Stage 0 needs micro-batch t at tick t
    // anyway, and the others depend on it: the feeder, up to two
    // micro-batches ahead, rarely holds anyone back.
    void feed(const_batch<T, typename Network::input> images, std::span<const std::int32_t> labels)
    {
        detail::check_micro_batch(core::options().batch, images.batch(), labels.size());
        threads_.rethrow_if_failed();
        core::refuse_while_paused("feed()");
        threads_.guarded([&] { core::send_micro_batch(images, labels); });
        threads_.grant(core::fed_);
    }

    epoch_statistics drain()
    {
        threads_.rethrow_if_failed();
        core::refuse_while_paused("drain()");
        threads_.guarded([&] { core::send_end_of_epoch(); });
        threads_.finish_epoch();
        epoch_statistics epoch = core::shared_.take_statistics();
        // Every stage waits for the next epoch: none touches its worker.
        core::start_epoch();
        threads_.begin_next_epoch();
        return epoch;
    }

    // Waits until every stage has run every tick of the micro-batches fed,
    // and no more: all stages then sit between the same two ticks, where
    // they stay while the guard lives (no tick is granted without a feed,
    // and feed() refuses to run). Their last writes happen before this
    // returns: reading through the guard is race-free. Rethrows a stage's
    // failure.
    [[nodiscard("the guard releases the pipeline when it goes: hold it in a variable")]] typename core::paused pause()
    {
        threads_.wait_until_resting();
        return core::hold_paused();
    }

    // Saves or restores the whole in-flight state (see
    // sequential_pipeline::transfer_state), paused meanwhile: the current
    // tick of every stage is finished, and the pipeline goes on at the next
    // feed. It may run under the caller's own guard. Restoring needs a
    // pipeline not fed this epoch; the checkpoint may come from either
    // driver. A load that fails part-way (a checkpoint of another
    // configuration) leaves the stages half-restored: the pipeline then
    // counts as failed, and every later call rethrows that error.
    template <state_archive Archive>
    void transfer_state(Archive& archive)
    {
        threads_.rethrow_if_failed();
        const typename core::paused held = pause();
        if constexpr (Archive::loading) {
            if (!core::at_epoch_start()) {
                raise_error(error_kind::logic_error,
                            "pipeline: a checkpoint can only be loaded before the epoch's first feed.");
            }
            threads_.load_or_fail([&] { core::transfer_pipeline_state(archive); });
            threads_.grant(core::fed_);
        } else {
            core::transfer_pipeline_state(archive);
        }
    }

    // The same for one stage (core.hpp: its share of the state and its
    // slice of the parameters), for checkpoints of one file per stage; a
    // pipeline is restored by loading every stage's, before the epoch's
    // first feed. A load that fails part-way fails the pipeline, as above.
    template <state_archive Archive>
    void transfer_stage_state(std::size_t stage, Archive& archive)
    {
        threads_.rethrow_if_failed();
        const typename core::paused held = pause();
        if constexpr (Archive::loading) {
            threads_.load_or_fail([&] { core::transfer_stage_state(stage, archive); });
            // The stages run on only once every one is restored.
            if (core::all_stages_at_fed()) threads_.grant(core::fed_);
        } else {
            core::transfer_stage_state(stage, archive);
        }
    }

private:
    // Last, so that its destructor stops and joins the threads before the
    // workers and channels they use go.
    stage_threads<core::stage_count> threads_{core::stop_};
};

} // namespace petra
