// The threaded driver (floor 7): one std::thread per stage, each running
// its stage's ticks as soon as the schedule allows, gated by the micro-batches
// fed so that all can be paused at the same tick. It computes what
// sequential_pipeline computes, bit for bit.
#pragma once

#include <algorithm>
#include <array>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <limits>
#include <mutex>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include <petra/batch_view.hpp>
#include <petra/error.hpp>
#include <petra/network.hpp>
#include <petra/pipeline/channel.hpp>
#include <petra/pipeline/core.hpp>
#include <petra/pipeline/options.hpp>
#include <petra/tensor_batch.hpp>
#include <petra/pipeline/worker.hpp>
#include <petra/state_archive.hpp>

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
        core::start_epoch();
        threads_.reserve(core::stage_count);
        const auto start_threads = [&]<std::size_t... I>(std::index_sequence<I...>) {
            (threads_.emplace_back([this] { run_stage<I>(); }), ...);
        };
#if PETRA_EXCEPTIONS
        try {
            start_threads(std::make_index_sequence<core::stage_count>{});
        } catch (...) {
            // A thread that could not start: stop and join those that did.
            shut_down();
            throw;
        }
#else
        start_threads(std::make_index_sequence<core::stage_count>{});
#endif
    }

    thread_pipeline(const thread_pipeline&) = delete;
    thread_pipeline& operator=(const thread_pipeline&) = delete;

    ~thread_pipeline() { shut_down(); }

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
        rethrow_if_failed();
        core::refuse_while_paused("feed()");
        guarded([&] { core::send_micro_batch(images, labels); });
        std::lock_guard lock(mutex_);
        granted_ = core::fed_;
        to_stages_.notify_all();
    }

    epoch_statistics drain()
    {
        rethrow_if_failed();
        core::refuse_while_paused("drain()");
        guarded([&] { core::send_end_of_epoch(); });
        std::unique_lock lock(mutex_);
        granted_ = std::numeric_limits<std::size_t>::max();
        to_stages_.notify_all();
        to_caller_.wait(lock, [&] { return finished_ == core::stage_count || failed(); });
        rethrow_failure();
        finished_ = 0;
        granted_ = 0;
        epoch_statistics epoch = core::take_statistics();
        // Every stage waits for the next epoch: none touches its worker.
        core::start_epoch();
        ++epoch_;
        to_stages_.notify_all(); // they wait for this before the next epoch
        return epoch;
    }

    // Waits until every stage has run every tick of the micro-batches fed,
    // and no more: all stages then sit between the same two ticks, where
    // they stay while the guard lives (no tick is granted without a feed,
    // and feed() refuses to run). Their last writes happen before this
    // returns: reading through the guard is race-free. Rethrows a stage's
    // failure.
    [[nodiscard("the guard releases the pipeline when it goes: hold it in a variable")]]
    typename core::paused pause()
    {
        {
            std::unique_lock lock(mutex_);
            to_caller_.wait(lock, [&] {
                return failed() || std::all_of(waiting_for_.begin(), waiting_for_.end(),
                                               [&](std::size_t tick) { return tick == granted_; });
            });
            rethrow_failure();
        }
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
        rethrow_if_failed();
        const typename core::paused held = pause();
        std::unique_lock lock(mutex_);
        if constexpr (Archive::loading) {
            if (!core::at_epoch_start()) {
                raise_error(error_kind::logic_error,
                            "pipeline: a checkpoint can only be loaded before the epoch's first feed.");
            }
            load_or_fail(lock, [&] { core::transfer_pipeline_state(archive); });
            granted_ = core::fed_;
            to_stages_.notify_all();
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
        rethrow_if_failed();
        const typename core::paused held = pause();
        std::unique_lock lock(mutex_);
        if constexpr (Archive::loading) {
            load_or_fail(lock, [&] { core::transfer_stage_state(stage, archive); });
            // The stages run on only once every one is restored.
            if (core::all_stages_at_fed()) {
                granted_ = core::fed_;
                to_stages_.notify_all();
            }
        } else {
            core::transfer_stage_state(stage, archive);
        }
    }

private:
    // Runs a load with mutex_ held (lock); a load that fails part-way fails
    // the pipeline: the failure is recorded, every stage stopped and woken,
    // and the exception goes on to the caller.
    template <class Load>
    void load_or_fail(std::unique_lock<std::mutex>& lock, Load&& load)
    {
#if PETRA_EXCEPTIONS
        try {
            load();
        } catch (...) {
            failure_ = std::current_exception();
            lock.unlock();
            core::stop_.stop();
            notify_everyone();
            throw;
        }
#else
        (void)lock;
        load();
#endif
    }

    template <std::size_t I>
    void run_stage()
    {
#if PETRA_EXCEPTIONS
        try {
            run_ticks<I>();
        } catch (const pipeline_stopped&) {
            // Stopped by another stage's failure or by the destructor.
        } catch (...) {
            {
                std::lock_guard lock(mutex_);
                if (!failure_) failure_ = std::current_exception();
            }
            // Stop first, so that every waiter woken next sees it.
            core::stop_.stop();
            notify_everyone();
        }
#else
        run_ticks<I>();
#endif
    }

    // Stage I's ticks, epoch after epoch, as they are granted, until the
    // pipeline stops.
    template <std::size_t I>
    void run_ticks()
    {
        auto& worker = core::template worker<I>();
        for (std::size_t epoch = 0;; ++epoch) {
            // With mutex_ held: whether to end the stage. With exceptions a
            // stop ends it at once (a stage waiting in a channel is woken by
            // pipeline_stopped); without, once it has run the ticks granted,
            // so that no neighbour waits for one of its messages forever.
            const auto stop_now = [&] {
                return core::stop_.stopped() &&
                       (PETRA_EXCEPTIONS || epoch_ != epoch || worker.next_tick() >= granted_);
            };
            {
                // Start epoch e + 1 only once the caller has taken epoch e's
                // results (drain resets the counters it reads).
                std::unique_lock lock(mutex_);
                to_stages_.wait(lock, [&] { return epoch_ == epoch || core::stop_.stopped(); });
                if (stop_now()) return;
            }
            do {
                std::unique_lock lock(mutex_);
                // Says which tick it waits for at every wake-up: a checkpoint
                // loaded meanwhile moves it.
                while (worker.next_tick() >= granted_ && !core::stop_.stopped()) {
                    if (waiting_for_[I] != worker.next_tick()) {
                        waiting_for_[I] = worker.next_tick();
                        to_caller_.notify_all(); // pause() looks at who waits for which tick
                    }
                    to_stages_.wait(lock);
                }
                waiting_for_[I] = not_waiting;
                if (stop_now()) return;
            } while (!worker.tick());
            std::lock_guard lock(mutex_);
            ++finished_;
            to_caller_.notify_all();
        }
    }

    void notify_everyone()
    {
        std::lock_guard lock(mutex_);
        to_stages_.notify_all();
        to_caller_.notify_all();
    }

    void shut_down()
    {
        core::stop_.stop();
        notify_everyone();
        for (std::thread& thread : threads_) {
            if (thread.joinable()) thread.join();
        }
    }

    template <class Operation>
    void guarded(Operation&& operation)
    {
#if PETRA_EXCEPTIONS
        try {
            operation();
        } catch (const pipeline_stopped&) {
            rethrow_if_failed();
            throw;
        }
#else
        operation();
#endif
    }

    void rethrow_if_failed()
    {
        std::lock_guard lock(mutex_);
        rethrow_failure();
    }

    // With mutex_ held: whether a stage failed, and its exception rethrown.
    // Without exceptions no failure is ever recorded: it ends the program
    // in the error handler, on the stage's thread.
    bool failed() const
    {
#if PETRA_EXCEPTIONS
        return failure_ != nullptr;
#else
        return false;
#endif
    }
    void rethrow_failure() const
    {
#if PETRA_EXCEPTIONS
        if (failure_) std::rethrow_exception(failure_);
#endif
    }

    std::mutex mutex_;
    // Two conditions, so that waiting stages do not wake one another: the
    // stages wait on to_stages_ (a grant, the next epoch, a stop), the
    // caller on to_caller_ (a stage done with the epoch or waiting for a
    // tick, a failure).
    std::condition_variable to_stages_;
    std::condition_variable to_caller_;
#if PETRA_EXCEPTIONS
    std::exception_ptr failure_;
#endif
    std::size_t finished_ = 0;
    std::size_t epoch_ = 0;
    std::size_t granted_ = 0; // ticks the stages may run this epoch: the micro-batches fed
    // For each stage, the tick it waits to be granted, or not_waiting.
    static constexpr std::size_t not_waiting = std::numeric_limits<std::size_t>::max();
    std::array<std::size_t, core::stage_count> waiting_for_ = [] {
        std::array<std::size_t, core::stage_count> all;
        all.fill(not_waiting);
        return all;
    }();
    std::vector<std::thread> threads_;
};

} // namespace petra
