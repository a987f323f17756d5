// PETRA's pipelines (floor 7): the stages of a network cut at Cuts, one
// worker each, connected by channels, driven either tick by tick on the
// caller's thread (sequential_pipeline, the simulator) or by one std::thread
// per stage (thread_pipeline). Both compute the same numbers, bit for bit.
//
//   constexpr auto cuts = partition<net, 4>();
//   auto parameters = net::make_parameters<float>(1);
//   thread_pipeline<net, cuts, sgd<float>> pipeline(parameters, sgd_options{}, schedule,
//                                                   {.batch = 64, .accumulation = 1});
//   for (each micro-batch) pipeline.feed(images, labels);
//   epoch_statistics epoch = pipeline.drain();
//
// The parameters stay in the caller's network_parameters, ONE copy: each
// stage reads and updates its own slice. The caller may read them once
// drain() has returned (and, with sequential_pipeline, between feed()
// calls; with thread_pipeline, after pause() until the next feed()); a
// thread_pipeline's stages update them at any time otherwise. The
// learning-rate function is called by every stage's thread, possibly at
// once: it must not keep unsynchronised state.
//
// transfer_state(archive) saves or restores everything in flight between
// two ticks (train/checkpoint.hpp writes it to a file): a run stopped
// mid-epoch resumes, in either driver, exactly where it stood.
#pragma once

#include <algorithm>
#include <array>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
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

#include <petra/network.hpp>
#include <petra/partition.hpp>
#include <petra/pipeline/accumulation.hpp>
#include <petra/pipeline/channel.hpp>
#include <petra/pipeline/stage.hpp>
#include <petra/pipeline/worker.hpp>
#include <petra/state_archive.hpp>

namespace petra {

namespace detail {

template <class Network, auto Cuts, class Optimizer, class T, class Indices>
struct worker_tuple;

template <class Network, auto Cuts, class Optimizer, class T, std::size_t... I>
struct worker_tuple<Network, Cuts, Optimizer, T, std::index_sequence<I...>> {
    using type = std::tuple<stage_worker<stage<Network, Cuts, I, T>, Optimizer, T>...>;
};

} // namespace detail

// What both drivers share: the workers, the channels between them, the
// feeder's side of the first channel and of the labels channel.
template <class Network, auto Cuts, class Optimizer, class T>
class pipeline_core {
    static_assert(valid_cuts<Network>(Cuts),
                  "The cuts must run from 0 to the network's block count, every stage holding at least one block.");

public:
    static constexpr std::size_t stage_count = Cuts.size() - 1;
    static constexpr std::size_t input_values = Network::input::size;

    template <std::size_t I>
    using worker_type = stage_worker<stage<Network, Cuts, I, T>, Optimizer, T>;

    // Observes every forward, backward and step of every stage (called on
    // the stages' threads). Set before feeding.
    void set_trace(std::function<void(const pipeline_event<T>&)> trace) { shared_.trace = std::move(trace); }

    // The statistics of the current epoch so far (loss and accuracy of the
    // micro-batches the last stage has seen).
    epoch_statistics progress()
    {
        std::lock_guard lock(shared_.statistics_mutex);
        return shared_.statistics;
    }

    template <std::size_t I>
    worker_type<I>& worker()
    {
        return std::get<I>(workers_);
    }

    // Bytes held by the stages (FIFOs, stashes, buffers, optimizer state) and
    // the channels; not the parameters themselves.
    std::size_t memory_bytes() const
    {
        std::size_t bytes = labels_.memory_bytes();
        for (const auto& channel : forward_) bytes += channel->memory_bytes();
        for (const auto& channel : backward_) bytes += channel->memory_bytes();
        std::apply([&](const auto&... worker) { ((bytes += worker.memory_bytes()), ...); }, workers_);
        return bytes;
    }

protected:
    pipeline_core(network_parameters<Network, T>& parameters, const typename Optimizer::options& optimizer_options,
                  std::function<double(std::size_t)> learning_rate, const pipeline_options& options,
                  channel_waiting mode)
        : pipeline_core(parameters, optimizer_options, std::move(learning_rate), options, mode,
                        std::make_index_sequence<stage_count>{})
    {
    }

    // The feeder's side: one micro-batch of options.batch examples.
    void send_micro_batch(const T* images, const std::int32_t* labels)
    {
        message<T> in = forward_.front()->begin_send();
        std::copy(images, images + options_.batch * input_values, in.values);
        *in.header = {fed_, false};
        forward_.front()->end_send();
        message<std::int32_t> out = labels_.begin_send();
        std::copy(labels, labels + options_.batch, out.values);
        *out.header = {fed_, false};
        labels_.end_send();
        ++fed_;
    }

    void send_end_of_epoch()
    {
        message<T> in = forward_.front()->begin_send();
        *in.header = {fed_, true};
        forward_.front()->end_send();
    }

    epoch_statistics take_statistics()
    {
        std::lock_guard lock(shared_.statistics_mutex);
        epoch_statistics epoch = shared_.statistics;
        shared_.statistics = {};
        return epoch;
    }

    void start_epoch()
    {
        fed_ = 0;
        std::apply([](auto&... worker) { (worker.start_epoch(), ...); }, workers_);
    }

    // Whether nothing has been fed since the epoch began.
    bool at_epoch_start() const
    {
        bool all_at_zero = fed_ == 0;
        std::apply([&](const auto&... worker) { ((all_at_zero = all_at_zero && worker.next_tick() == 0), ...); },
                   workers_);
        return all_at_zero;
    }

    // Everything that lives from one tick to the next, with every stage
    // between the same two ticks: the schedule's position, the epoch's
    // statistics so far, each stage's state and the messages in transit.
    template <state_archive Archive>
    void transfer_pipeline_state(Archive& archive)
    {
        archive.section("pipeline");
        archive.expect(stage_count, "stage count");
        for (std::size_t cut : Cuts) archive.expect(cut, "cut between stages");
        archive.expect(options_.batch, "micro-batch size");
        archive.expect(options_.accumulation, "accumulation (micro-batches per step)");
        archive.expect(options_.input_buffer ? 1 : 0, "input buffer");
        archive.expect(options_.parameter_buffer ? 1 : 0, "parameter buffer");
        archive.count(fed_, any_count);
        {
            std::lock_guard lock(shared_.statistics_mutex);
            shared_.statistics.transfer_state(archive);
        }
        std::apply([&](auto&... worker) { (worker.transfer_state(archive), ...); }, workers_);
        for (auto& channel : forward_) channel->transfer_state(archive);
        for (auto& channel : backward_) channel->transfer_state(archive);
        labels_.transfer_state(archive);
        if constexpr (Archive::loading) {
            bool consistent = true;
            std::apply([&](const auto&... worker) { ((consistent = consistent && worker.next_tick() == fed_), ...); },
                       workers_);
            if (!consistent) {
                throw std::runtime_error("pipeline checkpoint: the stages are not all at the tick of the micro-batches "
                                         "fed; the checkpoint is inconsistent.");
            }
        }
    }

    pipeline_options options_;
    stop_signal stop_;
    pipeline_shared<T> shared_;
    kernels::aligned_vector<T> weight_mask_;
    std::vector<std::unique_ptr<channel<T>>> forward_;  // forward_[j]: into stage j
    std::vector<std::unique_ptr<channel<T>>> backward_; // backward_[j]: from stage j + 1 into stage j
    channel<std::int32_t> labels_;
    typename detail::worker_tuple<Network, Cuts, Optimizer, T, std::make_index_sequence<stage_count>>::type workers_;
    std::size_t fed_ = 0;

private:
    template <std::size_t... I>
    pipeline_core(network_parameters<Network, T>& parameters, const typename Optimizer::options& optimizer_options,
                  std::function<double(std::size_t)> learning_rate, const pipeline_options& options,
                  channel_waiting mode, std::index_sequence<I...>)
        : options_(checked(options)), shared_{std::move(learning_rate), {}, {}, {}},
          weight_mask_(Network::template weight_mask<T>()), forward_(make_forward(mode)),
          backward_(make_backward(mode)),
          labels_("labels", 2 * stage_count + 2, options.batch, stop_, mode),
          workers_(worker_type<I>(parameters, optimizer_options, weight_mask_, options_, links<I>(), shared_)...)
    {
        if (!shared_.learning_rate) throw std::invalid_argument("pipeline: a learning-rate schedule is needed.");
    }

    static const pipeline_options& checked(const pipeline_options& options)
    {
        if (options.batch == 0) throw std::invalid_argument("pipeline: the batch must hold at least one example.");
        if (options.accumulation == 0) {
            throw std::invalid_argument("pipeline: the accumulation (micro-batches per step) must be at least 1.");
        }
        return options;
    }

    // Two messages per channel. Forward: at tick t stage j may send its
    // tick-t activation before stage j + 1 has taken the tick t - 1 one (the
    // simulator runs stage j first). Backward: one message would do for the
    // schedule, but a stage computes straight into its outgoing slot and its
    // neighbour reads straight from it, so with one slot the sender's
    // backward would wait for the receiver's whole backward (measured: 467
    // against 652 examples/s for the reference network in 2 stages).
    std::vector<std::unique_ptr<channel<T>>> make_forward(channel_waiting mode)
    {
        std::vector<std::unique_ptr<channel<T>>> channels;
        for (std::size_t j = 0; j < stage_count; ++j) {
            const std::size_t values = Network::profile[Cuts[j]].input_values;
            channels.push_back(std::make_unique<channel<T>>("forward into stage " + std::to_string(j), 2,
                                                            options_.batch * values, stop_, mode));
        }
        return channels;
    }
    std::vector<std::unique_ptr<channel<T>>> make_backward(channel_waiting mode)
    {
        std::vector<std::unique_ptr<channel<T>>> channels;
        for (std::size_t j = 0; j + 1 < stage_count; ++j) {
            const std::size_t values = Network::profile[Cuts[j + 1]].input_values;
            channels.push_back(std::make_unique<channel<T>>("backward into stage " + std::to_string(j), 2,
                                                            2 * options_.batch * values, stop_, mode));
        }
        return channels;
    }

    template <std::size_t I>
    typename worker_type<I>::links links()
    {
        typename worker_type<I>::links connections;
        connections.forward_in = forward_[I].get();
        if constexpr (I + 1 < stage_count) {
            connections.forward_out = forward_[I + 1].get();
            connections.backward_in = backward_[I].get();
        } else {
            connections.labels = &labels_;
        }
        if constexpr (I > 0) connections.backward_out = backward_[I - 1].get();
        return connections;
    }
};

// The simulator: every stage's ticks on the caller's thread, in order of
// ticks, then of stages. feed() runs one tick of every stage; drain() runs
// the ticks that empty the pipeline. Channels never wait: a message missing
// where the schedule expects one is a std::logic_error. After an exception
// the pipeline is unusable: later calls rethrow it.
template <class Network, auto Cuts, class Optimizer, class T = float>
class sequential_pipeline : public pipeline_core<Network, Cuts, Optimizer, T> {
    using core = pipeline_core<Network, Cuts, Optimizer, T>;

public:
    sequential_pipeline(network_parameters<Network, T>& parameters,
                        const typename Optimizer::options& optimizer_options,
                        std::function<double(std::size_t)> learning_rate, const pipeline_options& options)
        : core(parameters, optimizer_options, std::move(learning_rate), options, channel_waiting::never)
    {
        core::start_epoch();
    }

    // One micro-batch: options.batch images (NCHW) and their labels.
    void feed(const T* images, const std::int32_t* labels)
    {
        guarded([&] {
            core::send_micro_batch(images, labels);
            run_tick();
        });
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
                    throw std::logic_error("pipeline: a checkpoint can only be loaded before the epoch's first feed.");
                }
            }
            core::transfer_pipeline_state(archive);
        });
    }

    // Ends the epoch: runs ticks until every stage has differentiated every
    // micro-batch fed, and returns the epoch's statistics.
    epoch_statistics drain()
    {
        epoch_statistics epoch;
        guarded([&] {
            core::send_end_of_epoch();
            while (!run_tick()) {
            }
            epoch = core::take_statistics();
            core::start_epoch();
            done_ = {};
        });
        return epoch;
    }

private:
    // One tick of every stage not yet done; true once all are.
    bool run_tick()
    {
        bool all_done = true;
        [&]<std::size_t... I>(std::index_sequence<I...>) {
            ((done_[I] = done_[I] || core::template worker<I>().tick(), all_done = all_done && done_[I]), ...);
        }(std::make_index_sequence<core::stage_count>{});
        return all_done;
    }

    // A stage that threw left its FIFOs and counters mid-tick: from then on
    // every call reports that first failure instead of computing on them.
    template <class Operation>
    void guarded(Operation&& operation)
    {
        if (failure_) std::rethrow_exception(failure_);
        try {
            operation();
        } catch (...) {
            failure_ = std::current_exception();
            throw;
        }
    }

    std::array<bool, core::stage_count> done_{};
    std::exception_ptr failure_;
};

// One std::thread per stage, started once and reused across epochs. feed()
// blocks while the first stage's channel is full; drain() waits for every
// stage to finish the epoch. An exception in any stage stops every stage,
// and the next (or current) feed() or drain() rethrows it; a failure after
// the last feed() is reported only by drain(), so end every epoch with one.
// The destructor stops and joins every thread; it never hangs and never
// throws.
template <class Network, auto Cuts, class Optimizer, class T = float>
class thread_pipeline : public pipeline_core<Network, Cuts, Optimizer, T> {
    using core = pipeline_core<Network, Cuts, Optimizer, T>;

public:
    thread_pipeline(network_parameters<Network, T>& parameters, const typename Optimizer::options& optimizer_options,
                    std::function<double(std::size_t)> learning_rate, const pipeline_options& options)
        : core(parameters, optimizer_options, std::move(learning_rate), options, channel_waiting::blocking)
    {
        core::start_epoch();
        threads_.reserve(core::stage_count);
        try {
            [&]<std::size_t... I>(std::index_sequence<I...>) {
                (threads_.emplace_back([this] { run_stage<I>(); }), ...);
            }(std::make_index_sequence<core::stage_count>{});
        } catch (...) {
            // A thread that could not start: stop and join those that did.
            shut_down();
            throw;
        }
    }

    thread_pipeline(const thread_pipeline&) = delete;
    thread_pipeline& operator=(const thread_pipeline&) = delete;

    ~thread_pipeline() { shut_down(); }

    // A stage runs tick t of an epoch only once micro-batch t has been fed
    // (or the epoch's end announced), so that the stages can be stopped all
    // at the same tick (pause). Stage 0 needs micro-batch t at tick t
    // anyway, and the others depend on it: the feeder, up to two
    // micro-batches ahead, rarely holds anyone back.
    void feed(const T* images, const std::int32_t* labels)
    {
        rethrow_if_failed();
        guarded([&] { core::send_micro_batch(images, labels); });
        std::lock_guard lock(mutex_);
        granted_ = core::fed_;
        to_stages_.notify_all();
    }

    epoch_statistics drain()
    {
        rethrow_if_failed();
        guarded([&] { core::send_end_of_epoch(); });
        std::unique_lock lock(mutex_);
        granted_ = std::numeric_limits<std::size_t>::max();
        to_stages_.notify_all();
        to_caller_.wait(lock, [&] { return finished_ == core::stage_count || failure_; });
        if (failure_) std::rethrow_exception(failure_);
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
    // and no more: all stages then sit between the same two ticks. After
    // this (until the next feed) the caller may read the parameters.
    void pause()
    {
        std::unique_lock lock(mutex_);
        to_caller_.wait(lock, [&] {
            return failure_ || std::all_of(waiting_for_.begin(), waiting_for_.end(),
                                           [&](std::size_t tick) { return tick == granted_; });
        });
        if (failure_) std::rethrow_exception(failure_);
    }

    // Saves or restores the whole in-flight state (see
    // sequential_pipeline::transfer_state): saving pauses first, the
    // current tick of every stage is finished, and the pipeline goes on at
    // the next feed. Restoring needs a pipeline not fed this epoch; the
    // checkpoint may come from either driver.
    // A load that fails part-way (a checkpoint of another configuration)
    // leaves the stages half-restored: the pipeline then counts as failed,
    // and every later call rethrows that error.
    template <state_archive Archive>
    void transfer_state(Archive& archive)
    {
        rethrow_if_failed();
        pause();
        std::unique_lock lock(mutex_);
        if constexpr (Archive::loading) {
            if (!core::at_epoch_start()) {
                throw std::logic_error("pipeline: a checkpoint can only be loaded before the epoch's first feed.");
            }
            try {
                core::transfer_pipeline_state(archive);
            } catch (...) {
                failure_ = std::current_exception();
                lock.unlock();
                core::stop_.stop();
                notify_everyone();
                throw;
            }
            granted_ = core::fed_;
            to_stages_.notify_all();
        } else {
            core::transfer_pipeline_state(archive);
        }
    }

private:
    template <std::size_t I>
    void run_stage()
    {
        try {
            auto& worker = core::template worker<I>();
            for (std::size_t epoch = 0;; ++epoch) {
                {
                    // Start epoch e + 1 only once the caller has taken epoch
                    // e's results (drain resets the counters it reads).
                    std::unique_lock lock(mutex_);
                    to_stages_.wait(lock, [&] { return epoch_ == epoch || core::stop_.stopped(); });
                    if (core::stop_.stopped()) return;
                }
                do {
                    std::unique_lock lock(mutex_);
                    // Says which tick it waits for at every wake-up: a
                    // checkpoint loaded meanwhile moves it.
                    while (worker.next_tick() >= granted_ && !core::stop_.stopped()) {
                        if (waiting_for_[I] != worker.next_tick()) {
                            waiting_for_[I] = worker.next_tick();
                            to_caller_.notify_all(); // pause() looks at who waits for which tick
                        }
                        to_stages_.wait(lock);
                    }
                    waiting_for_[I] = not_waiting;
                    if (core::stop_.stopped()) return;
                } while (!worker.tick());
                std::lock_guard lock(mutex_);
                ++finished_;
                to_caller_.notify_all();
            }
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
        try {
            operation();
        } catch (const pipeline_stopped&) {
            rethrow_if_failed();
            throw;
        }
    }

    void rethrow_if_failed()
    {
        std::lock_guard lock(mutex_);
        if (failure_) std::rethrow_exception(failure_);
    }

    std::mutex mutex_;
    // Two conditions, so that waiting stages do not wake one another: the
    // stages wait on to_stages_ (a grant, the next epoch, a stop), the
    // caller on to_caller_ (a stage done with the epoch or waiting for a
    // tick, a failure).
    std::condition_variable to_stages_;
    std::condition_variable to_caller_;
    std::exception_ptr failure_;
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
