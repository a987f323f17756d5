// What every training loop does around a gradient, whoever computes it (a
// pipeline stage, or a trainer on the caller's thread): sum the gradients of
// k micro-batches and step once on their average, counting the steps so
// that each takes its own learning rate; and score each micro-batch of an
// epoch, refusing a loss that is not finite. One copy of this logic keeps
// PETRA and its baselines on the same schedule.
//
//   gradient_accumulation accumulation(k);
//   for (each micro-batch) {
//       float loss = trainer.accumulate_gradient(parameters, ..., gradient_sum);  // ADDS to gradient_sum
//       record_micro_batch(statistics, {loss, correct, batch}, describe_failure);
//       if (accumulation.count_gradient()) accumulation.step(optimizer, parameters, gradient_sum, schedule);
//   }
//   if (accumulation.pending() > 0) accumulation.step(optimizer, parameters, gradient_sum, schedule);
#pragma once

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <span>
#include <string>
#include <type_traits>

#include <petra/error.hpp>
#include <petra/state_archive.hpp>

namespace petra {

// An optimizer for one slice of the parameters: step(parameters,
// gradient_sum, count, learning_rate) applies the average of count
// gradients whose sum it is given.
template <class O, class T>
concept stage_optimizer = requires(O optimizer, std::span<T> parameters, std::span<const T> gradient, std::size_t count,
                                   double learning_rate)
{
    typename O::options;
    optimizer.step(parameters, gradient, count, learning_rate);
};

// Counts the gradients summed since the last step and the steps taken. Every
// k-th gradient completes a step; an epoch's last step may average fewer.
class gradient_accumulation {
public:
    explicit gradient_accumulation(std::size_t micro_batches_per_step) : per_step_(micro_batches_per_step)
    {
        if (per_step_ == 0) {
            raise_error(error_kind::invalid_argument,
                        "pipeline: the accumulation (micro-batches per step) must be at least 1.");
        }
    }

    // One more micro-batch's gradient has been added to the sum. Returns
    // true when the sum now holds k of them: time to step.
    bool count_gradient() { return ++pending_ == per_step_; }

    // The optimizer step on the pending gradients (at least one): their sum
    // and count go to the optimizer with learning_rate(s), s the number of
    // steps taken before this one; then the sum is zeroed. With replicas,
    // the sum holds each pending micro-batch's gradient from every replica
    // (pipeline/replicas.hpp): replicas x pending of them.
    template <class T, std::size_t Extent, stage_optimizer<T> Optimizer, class LearningRate>
        requires std::is_invocable_r_v<double, const LearningRate&, std::size_t>
    void step(Optimizer& optimizer, std::span<T, Extent> parameters, std::span<T, Extent> gradient_sum,
              const LearningRate& learning_rate, std::size_t replicas = 1)
    {
        optimizer.step(parameters, std::span<const T>(gradient_sum), pending_ * replicas, learning_rate(steps_));
        std::fill(gradient_sum.begin(), gradient_sum.end(), T(0));
        pending_ = 0;
        ++steps_;
    }

    std::size_t micro_batches_per_step() const { return per_step_; }
    std::size_t pending() const { return pending_; } // gradients in the sum, 0 to k
    std::size_t steps() const { return steps_; }     // steps taken

    // The gradient sum itself is its owner's to save.
    template <state_archive Archive>
    void transfer_state(Archive& archive)
    {
        archive.count(pending_, per_step_);
        archive.count(steps_, any_count);
    }

private:
    std::size_t per_step_;
    std::size_t pending_ = 0;
    std::size_t steps_ = 0;
};

// An epoch's score so far: the micro-batches seen, their examples, how many
// of those were classified right, and the sum of the micro-batches' mean
// losses.
struct epoch_statistics {
    std::size_t micro_batches = 0;
    std::size_t examples = 0;
    std::size_t correct = 0;
    double loss_sum = 0.0;

    double mean_loss() const { return micro_batches == 0 ? 0.0 : loss_sum / double(micro_batches); }
    double accuracy() const { return examples == 0 ? 0.0 : double(correct) / double(examples); }

    template <state_archive Archive>
    void transfer_state(Archive& archive)
    {
        archive.count(micro_batches, any_count);
        archive.count(examples, any_count);
        archive.count(correct, any_count);
        archive.values(std::span<double>(&loss_sum, 1));
    }
};

// One micro-batch's score: its mean loss, and of its examples how many were
// classified right.
struct micro_batch_score {
    double loss = 0.0;
    std::size_t correct = 0;
    std::size_t examples = 0;
};

// Adds the score to the epoch's statistics. A loss that is not finite is
// refused first, with nothing recorded: std::runtime_error whose message is
// describe_failure(loss), the caller's words for where it happened.
template <class DescribeFailure>
    requires std::is_invocable_r_v<std::string, DescribeFailure&, double>
void record_micro_batch(epoch_statistics& statistics, const micro_batch_score& score,
                        DescribeFailure&& describe_failure)
{
    if (!std::isfinite(score.loss)) raise_error(error_kind::runtime_error, describe_failure(score.loss));
    statistics.micro_batches += 1;
    statistics.examples += score.examples;
    statistics.correct += score.correct;
    statistics.loss_sum += score.loss;
}

} // namespace petra
