// Who runs each stage's ticks, and when (floor 7), for every placement of
// the pipeline: stage_threads gives each stage of a process a std::thread
// of its own (thread_pipeline; mpi_pipeline on a rank hosting several
// stages), caller_ticks runs them on the caller's thread, in stage order
// (sequential_pipeline; mpi_pipeline on a rank hosting one). Both run a
// stage's ticks through run_tick, so a failure is reported alike.
//
// The threads are gated by grants: a stage runs tick t of an epoch only
// once t ticks and one more have been granted (the driver grants one per
// micro-batch fed, and all of them when the epoch's end is announced), so
// that every stage can be brought to rest between the same two ticks
// (wait_until_resting: pause, checkpoints, reads of the parameters).
#pragma once

#include <algorithm>
#include <array>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <limits>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include <petra/error.hpp>
#include <petra/pipeline/channel.hpp>

namespace petra {

// Runs worker.tick() (true once the stage's epoch is complete). A failure
// other than a stop calls on_failure(stage, tick, what), which may end the
// process (an MPI rank does: its neighbours would wait forever) or return,
// and is then rethrown; a stop (pipeline_stopped) passes through.
// Without exceptions a failure ends in the error handler, inside the tick.
template <class Worker, class OnFailure>
bool run_tick(Worker& worker, std::size_t stage, OnFailure& on_failure)
{
#if PETRA_EXCEPTIONS
    const std::size_t tick = worker.next_tick();
    try {
        return worker.tick();
    } catch (const pipeline_stopped&) {
        throw;
    } catch (const std::exception& error) {
        on_failure(stage, tick, error.what());
        throw;
    } catch (...) {
        on_failure(stage, tick, "an exception that is not a std::exception");
        throw;
    }
#else
    (void)stage;
    (void)on_failure;
    return worker.tick();
#endif
}

// A failure handler that leaves the failure to the caller.
struct pass_failure_on {
    void operator()(std::size_t, std::size_t, const char*) const {}
};

// The ticks of the stages a caller runs itself: one call of tick() runs
// one tick of every stage not yet done with the epoch, in stage order (the
// simulator's order: stage j's message of tick t is there when stage j + 1
// reads it at tick t + 1).
template <std::size_t StageCount>
class caller_ticks {
public:
    // for_each_stage(visit) calls visit(worker, stage index) for every
    // stage the caller runs, in order; true once all are done.
    template <class ForEachStage, class OnFailure = pass_failure_on>
    bool tick(ForEachStage&& for_each_stage, OnFailure on_failure = {})
    {
        bool all_done = true;
        for_each_stage([&](auto& worker, std::size_t j) {
            done_[j] = done_[j] || run_tick(worker, j, on_failure);
            all_done = all_done && done_[j];
        });
        return all_done;
    }

    void start_epoch() { done_ = {}; }

private:
    std::array<bool, StageCount> done_{};
};

template <std::size_t StageCount>
class stage_threads {
public:
    // `stop` is the pipeline's: its channels wake on it.
    explicit stage_threads(stop_signal& stop) : stop_(stop) { waiting_for_.fill(not_hosted); }
    stage_threads(const stage_threads&) = delete;
    stage_threads& operator=(const stage_threads&) = delete;
    ~stage_threads() { stop(); }

    // Starts stage `stage`'s thread over `worker`, which must outlive it;
    // on_failure as run_tick says. A stage that fails stops every stage,
    // and the caller's next call rethrows the failure.
    template <class Worker, class OnFailure = pass_failure_on>
    void start(Worker& worker, std::size_t stage, OnFailure on_failure = {})
    {
        {
            std::lock_guard lock(mutex_);
            waiting_for_[stage] = not_waiting;
        }
        threads_.emplace_back([this, &worker, stage, on_failure] { run_stage(worker, stage, on_failure); });
    }

    // Lets the stages run the ticks of `ticks` micro-batches this epoch.
    void grant(std::size_t ticks)
    {
        std::lock_guard lock(mutex_);
        granted_ = ticks;
        to_stages_.notify_all();
    }

    // Grants every tick, then waits for every stage to finish the epoch.
    // The stages then wait for begin_next_epoch(): until it, the caller
    // may touch their workers. Rethrows a stage's failure.
    void finish_epoch()
    {
        std::unique_lock lock(mutex_);
        granted_ = std::numeric_limits<std::size_t>::max();
        to_stages_.notify_all();
        to_caller_.wait(lock, [&] { return finished_ == threads_.size() || failed(); });
        rethrow_failure();
        finished_ = 0;
        granted_ = 0;
    }
    void begin_next_epoch()
    {
        std::lock_guard lock(mutex_);
        ++epoch_;
        to_stages_.notify_all();
    }

    // Waits until every stage has run every tick granted, and no more: all
    // then wait between the same two ticks, and their last writes happen
    // before this returns. Rethrows a stage's failure.
    void wait_until_resting()
    {
        std::unique_lock lock(mutex_);
        to_caller_.wait(lock, [&] { return resting() || failed(); });
        rethrow_failure();
    }
    bool is_resting()
    {
        std::lock_guard lock(mutex_);
        return resting();
    }

    // Runs operation (a checkpoint's load) on the resting stages, held
    // meanwhile: a stage woken looks at its worker only once it is done.
    template <class Operation>
    void while_held(Operation&& operation)
    {
        std::lock_guard lock(mutex_);
        operation();
    }

    // The same, and a load that fails part-way fails the pipeline: the
    // failure is recorded, every stage stopped, and the exception goes on.
    template <class Load>
    void load_or_fail(Load&& load)
    {
#if PETRA_EXCEPTIONS
        try {
            while_held(load);
        } catch (...) {
            {
                std::lock_guard lock(mutex_);
                failure_ = std::current_exception();
            }
            stop_.stop();
            notify_everyone();
            throw;
        }
#else
        while_held(load);
#endif
    }

    // Runs operation (which sends into the stages' channels); a stop met
    // there is reported as the failure that caused it.
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

    // Stops every stage and joins its thread. With exceptions a stage
    // waiting in a channel is woken by pipeline_stopped; without, each
    // first finishes the ticks it was granted, so that no neighbour waits
    // for one of its messages forever.
    void stop()
    {
        stop_.stop();
        notify_everyone();
        for (std::thread& thread : threads_) {
            if (thread.joinable()) thread.join();
        }
    }

private:
    template <class Worker, class OnFailure>
    void run_stage(Worker& worker, std::size_t stage, OnFailure on_failure)
    {
#if PETRA_EXCEPTIONS
        try {
            run_ticks(worker, stage, on_failure);
        } catch (const pipeline_stopped&) {
            // Stopped by another stage's failure or by the destructor.
        } catch (...) {
            {
                std::lock_guard lock(mutex_);
                if (!failure_) failure_ = std::current_exception();
            }
            // Stop first, so that every waiter woken next sees it.
            stop_.stop();
            notify_everyone();
        }
#else
        run_ticks(worker, stage, on_failure);
#endif
    }

    // The stage's ticks, epoch after epoch, as they are granted, until the
    // pipeline stops.
    template <class Worker, class OnFailure>
    void run_ticks(Worker& worker, std::size_t stage, OnFailure& on_failure)
    {
        for (std::size_t epoch = 0;; ++epoch) {
            // With mutex_ held: whether to end the stage (see stop()).
            const auto stop_now = [&] {
                return stop_.stopped() && (PETRA_EXCEPTIONS || epoch_ != epoch || worker.next_tick() >= granted_);
            };
            {
                // Start epoch e + 1 only once the caller has taken epoch e's
                // results (finish_epoch, begin_next_epoch).
                std::unique_lock lock(mutex_);
                to_stages_.wait(lock, [&] { return epoch_ == epoch || stop_.stopped(); });
                if (stop_now()) return;
            }
            do {
                std::unique_lock lock(mutex_);
                // Says which tick it waits for at every wake-up: a checkpoint
                // loaded meanwhile moves it.
                while (worker.next_tick() >= granted_ && !stop_.stopped()) {
                    if (waiting_for_[stage] != worker.next_tick()) {
                        waiting_for_[stage] = worker.next_tick();
                        to_caller_.notify_all(); // wait_until_resting looks at who waits for which tick
                    }
                    to_stages_.wait(lock);
                }
                waiting_for_[stage] = not_waiting;
                if (stop_now()) return;
            } while (!run_tick(worker, stage, on_failure));
            std::lock_guard lock(mutex_);
            ++finished_;
            to_caller_.notify_all();
        }
    }

    // With mutex_ held: whether every stage waits for a tick not granted
    // (the next one, or a later one once a checkpoint has moved it on).
    bool resting() const
    {
        return std::all_of(waiting_for_.begin(), waiting_for_.end(), [&](std::size_t tick) {
            return tick == not_hosted || (tick != not_waiting && tick >= granted_);
        });
    }

    void notify_everyone()
    {
        std::lock_guard lock(mutex_);
        to_stages_.notify_all();
        to_caller_.notify_all();
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

    stop_signal& stop_;
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
    std::size_t finished_ = 0; // stages done with the epoch
    std::size_t epoch_ = 0;
    std::size_t granted_ = 0; // ticks the stages may run this epoch
    // For each stage, the tick it waits to be granted, not_waiting while it
    // runs, or not_hosted for a stage without a thread here.
    static constexpr std::size_t not_waiting = std::numeric_limits<std::size_t>::max();
    static constexpr std::size_t not_hosted = not_waiting - 1;
    std::array<std::size_t, StageCount> waiting_for_;
    std::vector<std::thread> threads_;
};

} // namespace petra
