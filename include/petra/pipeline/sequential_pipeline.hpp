// The sequential simulator (floor 7): every stage's ticks on the caller's
// thread, in order of ticks, then of stages. It computes what
// thread_pipeline computes, bit for bit, and serves as its reference.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <span>
#include <utility>

#include <petra/batch_view.hpp>
#include <petra/error.hpp>
#include <petra/network.hpp>
#include <petra/pipeline/core.hpp>
#include <petra/pipeline/options.hpp>
#include <petra/pipeline/stage_threads.hpp>
#include <petra/tensor_batch.hpp>
#include <petra/pipeline/worker.hpp>
#include <petra/state_archive.hpp>

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
        : core(parameters, optimizer_options, std::move(learning_rate), options, channel_waiting::never)
    {
        core::start_epoch();
    }

    // The other forms: pointers, or tensors (feed_forms, core.hpp).
    using forms::feed;

    // One micro-batch: options().batch images and as many labels; one tick
    // of every stage.
    void feed(const_batch<T, typename Network::input> images, std::span<const std::int32_t> labels)
    {
        detail::check_micro_batch(core::options().batch, images.batch(), labels.size());
        core::refuse_while_paused("feed()");
        guarded([&] {
            core::send_micro_batch(images, labels);
            run_tick();
        });
    }

    // Between feeds every stage has finished the same tick: the guard only
    // holds feed() and drain() back while it lives (paused_pipeline.hpp).
    // Rethrows a stage's failure.
    [[nodiscard("the guard releases the pipeline when it goes: hold it in a variable")]]
    typename core::paused pause()
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
        guarded([&] { core::transfer_stage_state(stage, archive); });
    }

    // Ends the epoch: runs ticks until every stage has differentiated every
    // micro-batch fed, and returns the epoch's statistics.
    epoch_statistics drain()
    {
        core::refuse_while_paused("drain()");
        epoch_statistics epoch;
        guarded([&] {
            core::send_end_of_epoch();
            while (!run_tick()) {
            }
            epoch = core::shared_.take_statistics();
            core::start_epoch();
            ticks_.start_epoch();
        });
        return epoch;
    }

private:
    // One tick of every stage not yet done; true once all are.
    bool run_tick()
    {
        return ticks_.tick([this](auto&& visit) { this->for_each_worker(visit); });
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

    caller_ticks<core::stage_count> ticks_;
#if PETRA_EXCEPTIONS
    std::exception_ptr failure_;
#endif
};

} // namespace petra
