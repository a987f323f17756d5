// The schedule of one stage (floor 7): which micro-batch it forwards and
// differentiates at each tick, the messages it receives and sends, and when
// it takes an optimizer step. Drivers (sequential_pipeline,
// thread_pipeline) only decide who calls tick() and when.
//
// With J stages, stage j at tick t (ticks counted from 0 in each epoch):
//   forward  micro-batch t - j,               from the message stage j - 1
//            sent at tick t - 1 (stage 0: the fed batch);
//   backward micro-batch t - 2 (J - 1) + j,   from the pair stage j + 1 sent
//            at tick t - 1 (the last stage: the micro-batch it has just
//            forwarded, through the loss, in the same tick);
//   then, every k-th backward, an optimizer step on the average of the k
//   gradients, at the schedule's rate times delay_rate_scale (1 unless
//   options.delay_rate_exponent is set). Forward and backward of a tick use
//   the same parameters.
// An epoch ends when a stage receives the end-of-epoch marker in place of a
// micro-batch: it learns the epoch's size M, passes the marker on, and
// finishes once it has differentiated all M micro-batches; a last partial
// accumulation is applied then, so that every micro-batch fed contributes
// exactly one gradient to every stage.
//
// Because each tick reads only what the neighbours produced at earlier
// ticks, in order, the numbers computed do not depend on when each stage
// runs: a threaded run and a sequential simulation agree bit for bit.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include <petra/error.hpp>
#include <petra/layers/softmax_cross_entropy_loss.hpp>
#include <petra/pipeline/accumulation.hpp>
#include <petra/pipeline/channel.hpp>
#include <petra/pipeline/options.hpp>
#include <petra/pipeline/replicas.hpp>
#include <petra/pipeline/stage.hpp>
#include <petra/state_archive.hpp>

namespace petra {

// What a stage did, for instrumentation (tests, fidelity tracking). The
// spans are valid only during the call.
template <class T>
struct pipeline_event {
    enum class kind { forward, backward, step };
    kind what;
    std::size_t stage;
    std::size_t tick;              // within the epoch
    std::size_t micro_batch;       // within the epoch; for a step, the last one it applies
    std::size_t step;              // optimizer steps this stage took before this event
    std::size_t gradients;         // step: how many micro-batch gradients it averages; backward: how many it has summed
    std::span<const T> parameters; // forward: those used; step: those before the step
    std::span<const T> gradient;   // step: the sum of the gradients it applies; backward: the sum so far
};

// What the workers of one pipeline share.
template <class T>
struct pipeline_shared {
    std::function<double(std::size_t)> learning_rate;
    std::function<void(const pipeline_event<T>&)> trace{}; // may be empty
    // With replicas on other ranks: replaces a stage's gradient sum by the
    // sum over its replicas (pipeline/replicas.hpp), before each step; may
    // be called by several stages' threads at once. Empty where the driver
    // sums between begin_tick() and end_tick() itself (the simulator), or
    // with one replica.
    std::function<void(std::size_t stage, std::span<T> gradient_sum)> sum_across_replicas{};
    // May be empty; with sum_across_replicas, lets the sum start early: in a
    // backward that ends with a step, called as each block's gradient is
    // final (last block first), with the block's offset in the stage's
    // gradient sum and its values, which stay untouched until
    // sum_across_replicas(stage, ...) of that step returns. Called by the
    // stage's own thread only.
    std::function<void(std::size_t stage, std::size_t offset, std::span<const T> values)> begin_replica_sum{};
    std::mutex statistics_mutex{};
    epoch_statistics statistics{}; // of the micro-batches the last stage has scored

    epoch_statistics statistics_so_far()
    {
        std::lock_guard lock(statistics_mutex);
        return statistics;
    }
    // The epoch's statistics, the count started again.
    epoch_statistics take_statistics()
    {
        std::lock_guard lock(statistics_mutex);
        return std::exchange(statistics, {});
    }
};

template <class Stage, class Optimizer, class T, class Transport = channel<T>,
          class LabelTransport = channel<std::int32_t>>
    requires stage_optimizer<Optimizer, T> && transport<Transport, T> && transport<LabelTransport, std::int32_t>
class stage_worker {
public:
    static constexpr std::size_t stage_count = Stage::stage_count;
    static constexpr std::size_t index = Stage::index;
    static constexpr std::size_t classes = Stage::is_last ? Stage::output_values : 1;

    struct links {
        Transport* forward_in = nullptr;   // from stage index - 1, or the feeder
        Transport* forward_out = nullptr;  // to stage index + 1 (not the last stage)
        Transport* backward_in = nullptr;  // from stage index + 1 (not the last stage)
        Transport* backward_out = nullptr; // to stage index - 1 (not stage 0)
        LabelTransport* labels = nullptr;  // the last stage's labels
    };

    // The stage's slice of a whole network's parameters; weight_mask is the
    // whole network's (Network::weight_mask).
    template <class Network>
    stage_worker(network_parameters_view<Network, T> parameters, const typename Optimizer::options& optimizer_options,
                 std::span<const T> weight_mask, const pipeline_options& options, links connections,
                 pipeline_shared<T>& shared)
        : stage_worker(parameters.values().template subspan<Stage::parameter_offset, Stage::parameter_count>(),
                       parameters.state().template subspan<Stage::state_offset, Stage::state_count>(),
                       optimizer_options, weight_mask.subspan(Stage::parameter_offset, Stage::parameter_count), options,
                       connections, shared)
    {}

    // The stage's parameters and running statistics held on their own (a
    // parameter_slice of its blocks); stage_weight_mask covers them alone.
    stage_worker(std::span<T, Stage::parameter_count> parameters, std::span<T, Stage::state_count> state,
                 const typename Optimizer::options& optimizer_options, std::span<const T> stage_weight_mask,
                 const pipeline_options& options, links connections, pipeline_shared<T>& shared)
        : stage_(parameters, state, options), optimizer_(optimizer_options, stage_weight_mask),
          accumulation_(options.accumulation), rate_scale_(checked_rate_scale(options)),
          replicas_(checked_replicas(options)), links_(connections), shared_(shared), logits_(logits_values(options)),
          grad_logits_(logits_values(options))
    {}

    // The values of the last stage's logits (and of their gradient) for
    // options; none in the other stages.
    static constexpr std::size_t logits_values(const pipeline_options& options)
    {
        return Stage::is_last ? options.batch * classes : 0;
    }

    static double checked_rate_scale(const pipeline_options& options)
    {
        if (!(options.delay_rate_exponent >= 0) || !std::isfinite(options.delay_rate_exponent)) {
            raise_error(error_kind::invalid_argument,
                        "pipeline: the delay rate exponent must be a finite number, 0 or more.");
        }
        return delay_rate_scale(options, Stage::delay);
    }

    Stage& stage() { return stage_; }
    // The transports the stage talks through.
    const links& connections() const { return links_; }
    Optimizer& optimizer() { return optimizer_; }
    std::size_t steps() const { return accumulation_.steps(); }

    void start_epoch()
    {
        tick_ = 0;
        epoch_size_.reset();
        backward_count_ = 0;
    }

    // Runs this stage's next tick; returns true once its epoch is complete.
    bool tick()
    {
        begin_tick();
        return end_tick();
    }

    // A tick in two halves, for a driver that sums the replicas' gradients
    // in between: begin_tick() runs the forward and the backward, after
    // which step_due() says whether the tick ends with an optimizer step
    // (every k-th backward, or the epoch's last partial accumulation);
    // end_tick() takes that step and returns true once the epoch is
    // complete. The step always ends its tick, so tick() computes the same.
    void begin_tick()
    {
        const std::size_t t = tick_++;
        if (t >= index) run_forward(t, t - index);
        if constexpr (!Stage::is_last) {
            constexpr std::size_t lag = 2 * (stage_count - 1) - index;
            if (t >= lag && due(t - lag)) run_backward(t, t - lag);
        }
        epoch_done_ = epoch_size_ && backward_count_ == *epoch_size_;
        step_due_ = step_due_ || (epoch_done_ && accumulation_.pending() > 0);
    }
    bool step_due() const { return step_due_; }
    bool end_tick()
    {
        if (step_due_) {
            step_due_ = false;
            step(tick_ - 1);
        }
        return epoch_done_;
    }

    // The next tick this stage will run (within the epoch).
    std::size_t next_tick() const { return tick_; }

    // The stage's state, its optimizer's and where it is in the schedule,
    // for checkpoints. Only between ticks, with nothing running.
    template <state_archive Archive>
    void transfer_state(Archive& archive)
    {
        static_assert(
            requires { optimizer_.transfer_state(archive); },
            "The optimizer must offer transfer_state(archive) for its pipeline to be checkpointed.");
        archive.section("stage worker");
        archive.expect(index, "stage index");
        archive.expect(accumulation_.micro_batches_per_step(), "accumulation (micro-batches per step)");
        stage_.transfer_state(archive);
        optimizer_.transfer_state(archive);
        archive.count(tick_, any_count);
        bool epoch_size_known = epoch_size_.has_value();
        transfer_flag(archive, epoch_size_known);
        std::size_t epoch_size = epoch_size_.value_or(0);
        archive.count(epoch_size, any_count);
        if (epoch_size_known) epoch_size_ = epoch_size;
        else epoch_size_.reset();
        archive.count(backward_count_, tick_);
        accumulation_.transfer_state(archive); // the pending gradients, then the steps
        archive.count(last_differentiated_, any_count);
        if constexpr (Archive::loading) check_restored_position();
    }

    // The epoch's size, once the end-of-epoch marker has reached this stage.
    std::optional<std::size_t> epoch_size() const { return epoch_size_; }

    std::size_t memory_bytes() const
    {
        return stage_.memory_bytes() + 2 * logits_.size() * sizeof(T) + 2 * Stage::parameter_count * sizeof(T);
    }

private:
    // A message's values (or the last stage's logits) as the batch of the
    // stage's input or output shape they hold.
    template <class Value>
    auto input_view(Value* values) const
    {
        return batch_view<Value, typename Stage::input>(values, stage_.batch());
    }
    template <class Value>
    auto output_view(Value* values) const
    {
        return batch_view<Value, typename Stage::output>(values, stage_.batch());
    }

    bool due(std::size_t micro_batch) const { return !epoch_size_ || micro_batch < *epoch_size_; }

    // A restored position must be one the schedule reaches: after ticks
    // 0 .. t - 1, stage j has forwarded micro-batches 0 .. t - j - 1 and
    // differentiated 0 .. t - lag - 1 (lag = 2 (J - 1) - j), or all M of the
    // epoch once it knows M, which it learns at tick M + j. Other counts
    // would keep the epoch from ending or break the stage's FIFOs.
    void check_restored_position() const
    {
        constexpr std::size_t lag = 2 * (stage_count - 1) - index;
        std::size_t forwarded = tick_ > index ? tick_ - index : 0;
        std::size_t differentiated = tick_ > lag ? tick_ - lag : 0;
        if (epoch_size_) {
            if (*epoch_size_ + index >= tick_) inconsistent("knows the epoch's size before it can");
            forwarded = std::min(forwarded, *epoch_size_);
            differentiated = std::min(differentiated, *epoch_size_);
        }
        if (backward_count_ != differentiated) {
            inconsistent("has differentiated " + std::to_string(backward_count_) +
                         " micro-batches where the schedule has " + std::to_string(differentiated));
        }
        if (stage_.in_flight() != forwarded - differentiated) {
            inconsistent("has " + std::to_string(stage_.in_flight()) +
                         " micro-batches in flight where the schedule has " +
                         std::to_string(forwarded - differentiated));
        }
    }
    [[noreturn]] void inconsistent(const std::string& what) const
    {
        raise_error(error_kind::runtime_error, "pipeline checkpoint: stage " + std::to_string(index) + " at tick " +
                                                   std::to_string(tick_) + " " + what +
                                                   "; the checkpoint is inconsistent.");
    }

    void run_forward(std::size_t t, std::size_t m)
    {
        if (!due(m)) return;
        message<T> in = links_.forward_in->begin_receive();
        if (in.header->end_of_epoch) {
            links_.forward_in->end_receive();
            epoch_size_ = m;
            if constexpr (!Stage::is_last) {
                message<T> out = links_.forward_out->begin_send();
                *out.header = {m, true};
                links_.forward_out->end_send();
            }
            return;
        }
        check_order(*in.header, m, "forward");
        if (shared_.trace) {
            shared_.trace(
                {pipeline_event<T>::kind::forward, index, t, m, accumulation_.steps(), 0, stage_.parameters(), {}});
        }
        if constexpr (!Stage::is_last) {
            message<T> out = links_.forward_out->begin_send();
            stage_.forward(input_view(in.values), output_view(out.values));
            links_.forward_in->end_receive();
            *out.header = {m, false};
            links_.forward_out->end_send();
        } else {
            stage_.forward(input_view(in.values), output_view(logits_.data()));
            links_.forward_in->end_receive();
            evaluate_loss(m);
            if constexpr (Stage::is_first) {
                stage_.backward(output_view(logits_.data()), output_view(grad_logits_.data()), {}, {},
                                replica_sum_starter());
            } else {
                send_backward(m, logits_.data(), grad_logits_.data());
            }
            after_backward(t, m);
        }
    }

    void run_backward(std::size_t t, std::size_t m)
    {
        message<T> in = links_.backward_in->begin_receive();
        check_order(*in.header, m, "backward");
        const std::size_t output = stage_.batch() * Stage::output_values;
        if constexpr (Stage::is_first) {
            stage_.backward(output_view(in.values), output_view(in.values + output), {}, {}, replica_sum_starter());
        } else {
            send_backward(m, in.values, in.values + output);
        }
        links_.backward_in->end_receive();
        after_backward(t, m);
    }

    // Backward of the stage, its input and input gradient written straight
    // into the message to the stage below.
    void send_backward(std::size_t m, const T* y, const T* grad_y)
    {
        message<T> out = links_.backward_out->begin_send();
        const std::size_t input = stage_.batch() * Stage::input_values;
        stage_.backward(output_view(y), output_view(grad_y), input_view(out.values), input_view(out.values + input),
                        replica_sum_starter());
        *out.header = {m, false};
        links_.backward_out->end_send();
    }

    // The stage's block_done for the backward about to run: hands each
    // final block gradient to begin_replica_sum when this backward ends with
    // a step (the k-th of an accumulation, or the epoch's last where the
    // stage knows the epoch's size by then; otherwise the step sums all at
    // once), and does nothing else.
    auto replica_sum_starter()
    {
        const bool ends_with_step = accumulation_.pending() + 1 == accumulation_.micro_batches_per_step() ||
                                    (epoch_size_ && backward_count_ + 1 == *epoch_size_);
        const bool starting = ends_with_step && shared_.begin_replica_sum && shared_.sum_across_replicas;
        return [this, starting](std::span<const T> block_gradient) {
            if (starting) {
                const auto offset = std::size_t(block_gradient.data() - stage_.gradient().data());
                shared_.begin_replica_sum(index, offset, block_gradient);
            }
        };
    }

    void evaluate_loss(std::size_t m)
    {
        message<std::int32_t> labels = links_.labels->begin_receive();
        check_order(*labels.header, m, "labels");
        const std::size_t batch = stage_.batch();
        using loss = typename softmax_cross_entropy_loss<classes>::template bind<shape<classes>>;
        const T value = loss::evaluate(batch, logits_.data(), labels.values, grad_logits_.data());
        const std::size_t correct = loss::correct(batch, logits_.data(), labels.values);
        links_.labels->end_receive();
        std::lock_guard lock(shared_.statistics_mutex);
        record_micro_batch(shared_.statistics, {double(value), correct, batch}, [m](double loss) {
            return "stage " + std::to_string(index) + " (blocks " + std::to_string(Stage::first_block) + " to " +
                   std::to_string(Stage::end_block - 1) + "): the loss of micro-batch " + std::to_string(m) +
                   " of this epoch is not finite (" + std::to_string(loss) + ").";
        });
    }

    void after_backward(std::size_t t, std::size_t m)
    {
        ++backward_count_;
        const bool step_due = accumulation_.count_gradient();
        if (shared_.trace) {
            shared_.trace({pipeline_event<T>::kind::backward,
                           index,
                           t,
                           m,
                           accumulation_.steps(),
                           accumulation_.pending(),
                           {},
                           stage_.gradient()});
        }
        last_differentiated_ = m;
        step_due_ = step_due_ || step_due;
    }

    // Applies the gradients summed since the last step (over the replicas,
    // if any) and zeroes their sum.
    void step(std::size_t t)
    {
        if (shared_.sum_across_replicas) shared_.sum_across_replicas(index, std::span<T>(stage_.gradient()));
        if (shared_.trace) {
            shared_.trace({pipeline_event<T>::kind::step, index, t, last_differentiated_, accumulation_.steps(),
                           accumulation_.pending(), stage_.parameters(), stage_.gradient()});
        }
        // A factor of exactly 1 (p = 0, the last stage) leaves the rate as it is, bit for bit.
        accumulation_.step(
            optimizer_, stage_.parameters(), stage_.gradient(),
            [this](std::size_t s) { return shared_.learning_rate(s) * rate_scale_; }, replicas_);
    }

    void check_order(const message_header& header, std::size_t expected, const char* what) const
    {
        if (header.end_of_epoch || header.micro_batch != expected) {
            raise_error(error_kind::logic_error, "pipeline schedule error: stage " + std::to_string(index) +
                                                     " expected the " + what + " message of micro-batch " +
                                                     std::to_string(expected) + ".");
        }
    }

    Stage stage_;
    Optimizer optimizer_;
    gradient_accumulation accumulation_;
    double rate_scale_; // after accumulation_: it divides by k, checked there
    std::size_t replicas_;
    links links_;
    pipeline_shared<T>& shared_;
    kernels::aligned_vector<T> logits_;
    kernels::aligned_vector<T> grad_logits_;
    std::size_t tick_ = 0;
    std::optional<std::size_t> epoch_size_;
    std::size_t backward_count_ = 0;
    std::size_t last_differentiated_ = 0;
    // Within a tick only (false and unused between ticks): whether it ends
    // with a step, and whether it completes the epoch.
    bool step_due_ = false;
    bool epoch_done_ = false;
};

} // namespace petra
