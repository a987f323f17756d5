// What both drivers of a pipeline in one process share (floor 7): the
// workers of the stages of a network cut at Cuts, the channels between
// them (built from the link plan, links.hpp), the feeder's side, the pause
// guard's bookkeeping, and the state a checkpoint saves. The drivers
// (sequential_pipeline.hpp, thread_pipeline.hpp) decide who runs each
// stage's ticks and when (stage_threads.hpp). A pipeline over MPI ranks
// (mpi/pipeline.hpp) is another placement of the same pieces: the link
// plan, the feeder's side, the ticks, the pause gate and a stage's
// checkpoint records (transfer_stage_records).
//
// The parameters stay in the caller's network_parameters (or the caller's
// arrays, through a network_parameters_view), ONE copy, which must outlive
// the pipeline: each stage reads and updates its own slice. The caller may
// read them once
// drain() has returned, and while a paused_pipeline from pause() lives
// (paused_pipeline.hpp); a thread_pipeline's stages update them at any
// time otherwise. The learning-rate function is called by every stage's
// thread, possibly at once: it must not keep unsynchronised state.
//
// The options and the cuts are checked once, where they are used: the
// stage checks the cuts (static_assert) and the batch, the worker the
// accumulation; a pipeline passes their errors on.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <petra/batch_view.hpp>
#include <petra/error.hpp>
#include <petra/kernels/simd.hpp>
#include <petra/network.hpp>
#include <petra/owned_batch.hpp>
#include <petra/parameter_slice.hpp>
#include <petra/pipeline/accumulation.hpp>
#include <petra/pipeline/channel.hpp>
#include <petra/pipeline/links.hpp>
#include <petra/pipeline/options.hpp>
#include <petra/pipeline/paused_pipeline.hpp>
#include <petra/pipeline/replicas.hpp>
#include <petra/pipeline/stage.hpp>
#include <petra/pipeline/worker.hpp>
#include <petra/state_archive.hpp>
#include <petra/tensor_batch.hpp>
#include <petra/type_list.hpp>

namespace petra {

namespace detail {

template <class Network, auto Cuts, class Optimizer, class T, class Indices>
struct worker_tuple;

template <class Network, auto Cuts, class Optimizer, class T, std::size_t... I>
struct worker_tuple<Network, Cuts, Optimizer, T, std::index_sequence<I...>> {
    using type = std::tuple<stage_worker<stage<Network, Cuts, I, T>, Optimizer, T>...>;
};

// One micro-batch is `batch` images and as many labels: the sentence that
// refuses any other count, in every driver.
inline void check_micro_batch(std::size_t batch, std::size_t images, std::size_t labels)
{
    if (images != batch || labels != batch) {
        raise_error(error_kind::invalid_argument, "pipeline feed: " + std::to_string(images) + " images and " +
                                                      std::to_string(labels) + " labels; every micro-batch holds " +
                                                      std::to_string(batch) + " of each.");
    }
}

} // namespace detail

// The forms of feed, the same in every driver (thread_pipeline,
// sequential_pipeline, mpi_pipeline). A driver implements one,
//
//   void feed(const_batch<T, Network::input> images, std::span<const std::int32_t> labels);
//
// one micro-batch of options().batch images (an owned_batch, or a
// batch_view of the caller's memory) and as many labels (a std::vector,
// an array), refused otherwise with detail::check_micro_batch's sentence;
// with replicas, the global micro-batch of replicas x batch of each
// (pipeline/replicas.hpp).
// The others build those arguments and call it:
//
//   feed(const T* images, const std::int32_t* labels);   // global_batch(options()) of each (images NCHW)
//   feed(const Images& images, const Labels& labels);    // tensors (tensor_batch.hpp): images
//                                                         // N x C x H x W, labels N or any range of them
//
//   owned_batch<float, net::input> images(64);
//   std::vector<std::int32_t> labels(64);
//   pipeline.feed(images, labels);
//
// mpi_pipeline adds feed() without data, for the ranks that do not read
// it. A driver derives from feed_forms<itself, Network, T> and says
// `using feed_forms<...>::feed;`.
template <class Driver, class Network, class T>
class feed_forms {
public:
    // A null pointer stands for no data (the ranks of an mpi_pipeline that
    // do not feed); the driver refuses it where it needs data.
    void feed(const T* images, const std::int32_t* labels)
    {
        const std::size_t batch = global_batch(driver().options());
        driver().feed(
            images != nullptr ? const_batch<T, typename Network::input>(images, batch)
                              : const_batch<T, typename Network::input>(),
            labels != nullptr ? std::span<const std::int32_t>(labels, batch) : std::span<const std::int32_t>());
    }

    template <tensor_like Images, label_source Labels>
    void feed(const Images& images, const Labels& labels)
    {
        const batch_view<const T, typename Network::input> x =
            as_batch<typename Network::input>(images, "pipeline feed: images");
        driver().feed(x, as_labels(labels, x.batch(), "pipeline feed: labels"));
    }

private:
    Driver& driver() { return static_cast<Driver&>(*this); }
};

// The records that open one stage's checkpoint shard, in every driver: the
// pipeline's figures (stage count, cuts, options, replicas: a shard of
// another replica count is refused), the stage and the micro-batches fed
// this epoch (read back into `fed`).
template <auto Cuts, state_archive Archive>
void transfer_stage_header(Archive& archive, std::size_t stage_index, const pipeline_options& options, std::size_t& fed)
{
    archive.section("pipeline stage");
    archive.expect(Cuts.size() - 1, "stage count");
    for (std::size_t cut : Cuts) archive.expect(cut, "cut between stages");
    archive.expect(options.batch, "micro-batch size");
    archive.expect(options.accumulation, "accumulation (micro-batches per step)");
    archive.expect(options.input_buffer ? 1 : 0, "input buffer");
    archive.expect(options.parameter_buffer ? 1 : 0, "parameter buffer");
    archive.expect(stage_index, "stage index");
    std::size_t saved_replicas = options.replicas;
    archive.count(saved_replicas, any_count);
    if (saved_replicas != options.replicas) {
        raise_error(error_kind::runtime_error,
                    "pipeline checkpoint: it was saved by " + std::to_string(saved_replicas) +
                        " replicas and this pipeline runs " + std::to_string(options.replicas) +
                        "; resume with the same replicas.");
    }
    archive.count(fed, any_count);
}

// One stage's share of the state, the same records in every placement
// (pipeline_core::transfer_stage_state says which): worker_of(index) is
// stage `index`'s worker (index a std::integral_constant),
// transfer_link(transport, link index) transfers the messages in transit
// on one transport into the stage (numbered as links.hpp says),
// transfer_parameters(index) the stage's slice of the parameters; `fed` is
// the placement's count of micro-batches fed, read back when loading.
template <auto Cuts, state_archive Archive, class T, class WorkerOf, class TransferLink, class TransferParameters>
void transfer_stage_records(std::size_t stage_index, Archive& archive, const pipeline_options& options,
                            std::size_t& fed, pipeline_shared<T>& shared, WorkerOf&& worker_of,
                            TransferLink&& transfer_link, TransferParameters&& transfer_parameters)
{
    constexpr std::size_t stage_count = Cuts.size() - 1;
    if (stage_index >= stage_count) {
        raise_error(error_kind::invalid_argument, "pipeline: stage " + std::to_string(stage_index) + " of " +
                                                      std::to_string(stage_count) + " stages.");
    }
    for_each_index<stage_count>([&](auto index) {
        constexpr std::size_t i = decltype(index)::value;
        if (i != stage_index) return;
        auto& worker = worker_of(index);
        std::size_t saved_fed = fed;
        transfer_stage_header<Cuts>(archive, i, options, saved_fed);
        if constexpr (Archive::loading) {
            if (worker.next_tick() != 0 || (fed != 0 && fed != saved_fed)) {
                raise_error(error_kind::runtime_error,
                            "pipeline checkpoint: stage " + std::to_string(i) +
                                " is not at the start of an epoch, or the stages' shards disagree on the "
                                "micro-batches fed.");
            }
            fed = saved_fed;
        }
        if constexpr (i + 1 == stage_count) {
            std::lock_guard lock(shared.statistics_mutex);
            shared.statistics.transfer_state(archive);
        }
        worker.transfer_state(archive);
        const auto& in = worker.connections();
        transfer_link(*in.forward_in, forward_link_index(i));
        if constexpr (i + 1 < stage_count) transfer_link(*in.backward_in, backward_link_index(stage_count, i));
        if constexpr (i + 1 == stage_count) transfer_link(*in.labels, labels_link_index(stage_count));
        transfer_parameters(index);
        if constexpr (Archive::loading) {
            if (worker.next_tick() != fed) {
                raise_error(error_kind::runtime_error, "pipeline checkpoint: stage " + std::to_string(i) +
                                                           " is not at the tick of the micro-batches fed; the "
                                                           "checkpoint is inconsistent.");
            }
        }
    });
}

template <class Network, auto Cuts, class Optimizer, class T>
class pipeline_core : public pipeline_layout<Network, Cuts, T> {
    using layout = pipeline_layout<Network, Cuts, T>;

public:
    static constexpr std::size_t stage_count = Cuts.size() - 1;
    static constexpr std::size_t input_values = Network::input::size;
    // What pause() returns, in either driver (paused_pipeline.hpp).
    using paused = paused_pipeline<Network, Cuts, T>;

    template <std::size_t I>
    using worker_type = stage_worker<stage<Network, Cuts, I, T>, Optimizer, T>;

    // Observes every forward, backward and step of every stage (called on
    // the stages' threads). Set before feeding.
    void set_trace(std::function<void(const pipeline_event<T>&)> trace) { shared_.trace = std::move(trace); }

    // The statistics of the current epoch so far (loss and accuracy of the
    // micro-batches the last stage has seen).
    epoch_statistics progress() { return shared_.statistics_so_far(); }

    const pipeline_options& options() const { return options_; }

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
    pipeline_core(network_parameters_view<Network, T> parameters, const typename Optimizer::options& optimizer_options,
                  std::function<double(std::size_t)> learning_rate, const pipeline_options& options,
                  channel_waiting mode)
        : pipeline_core(parameters, optimizer_options, std::move(learning_rate), options, mode,
                        std::make_index_sequence<stage_count>{})
    {}

    // A guard over the parameters and the stages' gradient sums. The driver
    // has brought every stage to rest between the same two ticks.
    paused hold_paused()
    {
        const auto sums = std::apply(
            [](auto&... worker) {
                return typename paused::gradient_sums{std::span<const T>(worker.stage().gradient())...};
            },
            workers_);
        return gate_.template hold<Network, Cuts, T>(parameters_, sums);
    }

    // Called first by feed() and drain(): while a guard lives, no stage may
    // run (see paused_pipeline.hpp).
    void refuse_while_paused(const char* operation) const { gate_.refuse_while_paused(operation); }

    // The feeder's side: one micro-batch, whose counts the driver has
    // checked (detail::check_micro_batch).
    void send_micro_batch(const_batch<T, typename Network::input> images, std::span<const std::int32_t> labels)
    {
        petra::send_micro_batch<T>(*forward_.front(), labels_, images, labels, fed_);
        ++fed_;
    }

    void send_end_of_epoch() { petra::send_end_of_epoch<T>(*forward_.front(), fed_); }

    // Calls visit(worker, stage index) for every stage, in order.
    template <class Visit>
    void for_each_worker(Visit&& visit)
    {
        for_each_index<stage_count>([&](auto index) { visit(std::get<decltype(index)::value>(workers_), index()); });
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

    // Whether every stage's next tick is that of the micro-batches fed.
    bool all_stages_at_fed() const
    {
        bool all = true;
        std::apply([&](const auto&... worker) { ((all = all && worker.next_tick() == fed_), ...); }, workers_);
        return all;
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
        if constexpr (Archive::loading) check_restored_schedule();
    }

    // A restored state must be one the schedule passes through: every stage
    // at the tick t of the micro-batches fed (each stage checks its own
    // counts, worker.hpp) and, between feeds, in each channel the messages
    // in flight after tick t - 1: into stage j > 0 the activation of
    // micro-batch t - j, into stage j < J - 1 the pair of micro-batch
    // t - 2 (J - 1) + j, to the last stage the labels of the micro-batches
    // it has not yet scored, each one of the network's classes. Any other
    // content would make a stage wait for a message that never comes, or
    // fail in the middle of a tick.
    void check_restored_schedule()
    {
        bool at_fed_tick = true;
        bool epoch_size_known = false;
        bool epoch_size_fed = true; // the end-of-epoch marker carries the count fed
        std::apply(
            [&](const auto&... worker) {
                ((at_fed_tick = at_fed_tick && worker.next_tick() == fed_,
                  epoch_size_known = epoch_size_known || worker.epoch_size().has_value(),
                  epoch_size_fed = epoch_size_fed && worker.epoch_size().value_or(fed_) == fed_),
                 ...);
            },
            workers_);
        if (!at_fed_tick || !epoch_size_fed) {
            raise_error(error_kind::runtime_error,
                        "pipeline checkpoint: the stages are not all at the tick of the micro-batches fed; the "
                        "checkpoint is inconsistent.");
        }
        if (epoch_size_known) return; // saved while draining: the stages' own checks hold
        const std::size_t t = fed_;
        // Micro-batches first, first + 1, ... (count of them) in a channel.
        const auto expect = [](auto& channel, std::size_t first, std::size_t count, const std::string& name) {
            const auto messages = channel.queued_messages();
            bool matches = messages.size() == count;
            for (std::size_t i = 0; matches && i < count; ++i) {
                matches = !messages[i].header->end_of_epoch && messages[i].header->micro_batch == first + i;
            }
            if (!matches) {
                raise_error(error_kind::runtime_error, "pipeline checkpoint: channel '" + name +
                                                           "' does not hold the " + std::to_string(count) +
                                                           " messages the schedule has in flight; the checkpoint "
                                                           "is inconsistent.");
            }
        };
        expect(*forward_[0], 0, 0, "forward into stage 0");
        for (std::size_t j = 1; j < stage_count; ++j) {
            expect(*forward_[j], t - j, t >= j ? 1 : 0, "forward into stage " + std::to_string(j));
        }
        for (std::size_t j = 0; j + 1 < stage_count; ++j) {
            const std::size_t lag = 2 * (stage_count - 1) - j;
            expect(*backward_[j], t - lag, t >= lag ? 1 : 0, "backward into stage " + std::to_string(j));
        }
        const std::size_t unscored = std::min(t, stage_count - 1);
        expect(labels_, t - unscored, unscored, "labels");
        constexpr auto classes = static_cast<std::int32_t>(Network::output::size);
        for (const message<std::int32_t>& labels : labels_.queued_messages()) {
            if (!std::all_of(labels.values, labels.values + labels.size,
                             [](std::int32_t label) { return label >= 0 && label < classes; })) {
                raise_error(error_kind::runtime_error,
                            "pipeline checkpoint: a label in flight is not one of the network's " +
                                std::to_string(classes) + " classes; the checkpoint is inconsistent.");
            }
        }
    }

    // One stage's share of the state, for checkpoints in one file per
    // stage (train/sharded_checkpoint.hpp): the pipeline's figures, the
    // micro-batches fed, the epoch's statistics (the last stage, which
    // scores), the stage's worker, the messages in transit INTO the stage
    // (forward, backward, and the labels for the last stage) and its slice
    // of the parameters. Every stage between the same two ticks. Loaded
    // stage by stage into a pipeline not fed this epoch; an MPI pipeline
    // writes and reads the same records (mpi/pipeline.hpp).
    template <state_archive Archive>
    void transfer_stage_state(std::size_t stage_index, Archive& archive)
    {
        const auto worker_of = [&](auto index) -> auto& { return worker<decltype(index)::value>(); };
        transfer_stage_records<Cuts>(
            stage_index, archive, options_, fed_, shared_, worker_of,
            [&](auto& channel, std::size_t) { channel.transfer_state(archive); },
            [&](auto index) {
                constexpr std::size_t i = decltype(index)::value;
                using slice = parameter_slice<Network, Cuts[i], Cuts[i + 1], T>;
                slice::transfer(
                    archive, parameters_.values().template subspan<slice::parameter_offset, slice::parameter_count>(),
                    parameters_.state().template subspan<slice::state_offset, slice::state_count>());
            });
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
    network_parameters_view<Network, T> parameters_;
    pause_gate gate_;

    template <std::size_t... I>
    pipeline_core(network_parameters_view<Network, T> parameters, const typename Optimizer::options& optimizer_options,
                  std::function<double(std::size_t)> learning_rate, const pipeline_options& options,
                  channel_waiting mode, std::index_sequence<I...>)
        : options_(options), shared_{.learning_rate = std::move(learning_rate)},
          weight_mask_(Network::template weight_mask<T>()), forward_(make_forward(mode)),
          backward_(make_backward(mode)), labels_(make_labels(mode)),
          workers_(worker_type<I>(parameters, optimizer_options, weight_mask_, options_, links<I>(), shared_)...),
          parameters_(parameters)
    {
        if (!shared_.learning_rate) {
            raise_error(error_kind::invalid_argument, "pipeline: a learning-rate schedule is needed.");
        }
    }

    // The channels of the plan (links.hpp).
    std::unique_ptr<channel<T>> make_channel(const link_plan& plan, channel_waiting mode)
    {
        return std::make_unique<channel<T>>(plan.name, plan.capacity, plan.message_values, stop_, mode);
    }
    channel<std::int32_t> make_labels(channel_waiting mode)
    {
        const link_plan plan = layout::labels_link(options_.batch);
        return channel<std::int32_t>(plan.name, plan.capacity, plan.message_values, stop_, mode);
    }
    std::vector<std::unique_ptr<channel<T>>> make_forward(channel_waiting mode)
    {
        std::vector<std::unique_ptr<channel<T>>> channels;
        for (std::size_t j = 0; j < stage_count; ++j) {
            channels.push_back(make_channel(layout::forward_link(j, options_.batch), mode));
        }
        return channels;
    }
    std::vector<std::unique_ptr<channel<T>>> make_backward(channel_waiting mode)
    {
        std::vector<std::unique_ptr<channel<T>>> channels;
        for (std::size_t j = 0; j + 1 < stage_count; ++j) {
            channels.push_back(make_channel(layout::backward_link(j, options_.batch), mode));
        }
        return channels;
    }

    template <std::size_t I>
    typename worker_type<I>::links links()
    {
        return stage_links<typename worker_type<I>::links, I, stage_count>(forward_, backward_, &labels_);
    }
};

} // namespace petra
