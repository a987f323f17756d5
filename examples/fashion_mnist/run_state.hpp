// A run's plan (its budget and learning-rate schedule, fixed by the recipe
// and the data) and its position (where it stands, what it has finished):
// with the method's state and the parameters, the position is what a
// checkpoint holds.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <random>
#include <vector>

#include <petra/petra.hpp>

#include "options.hpp"

namespace fashion {

// One finished epoch, as the metrics file and the summary show it.
struct epoch_record {
    std::size_t epoch = 0, steps = 0;
    double train_loss = 0, train_accuracy = 0, test_loss = 0, test_accuracy = 0, seconds = 0, learning_rate = 0;
};

// Where a run stands: the next micro-batch to train, the time spent, the
// augmentation generator, the finished epochs.
struct run_position {
    std::size_t epoch = 0; // the current epoch, from 0
    std::size_t batch = 0; // the next micro-batch of this epoch's order
    std::size_t steps = 0; // micro-batches trained in the whole run
    double training_seconds = 0;
    std::mt19937_64 generator; // this epoch's augmentation generator
    std::vector<epoch_record> epochs;
};

// The run's budget in micro-batches and its schedule in optimizer steps.
class run_plan {
public:
    run_plan(const training_recipe& recipe, std::size_t batches_per_epoch)
        : epochs_(recipe.epochs), accumulation_(recipe.accumulation), batches_per_epoch_(batches_per_epoch),
          total_steps_(recipe.epochs * batches_per_epoch)
    {
        if (recipe.max_steps != 0) total_steps_ = std::min(total_steps_, recipe.max_steps);
        const std::size_t optimizer_steps = optimizer_steps_in(total_steps_);
        schedule_.peak = recipe.learning_rate;
        schedule_.warmup_steps =
            std::size_t(recipe.warmup_epochs * double(batches_per_epoch) / double(recipe.accumulation));
        schedule_.total_steps = optimizer_steps;
        schedule_.shape = recipe.schedule;
        if (recipe.schedule == decay::step) {
            schedule_.milestones = {optimizer_steps / 2, optimizer_steps * 3 / 4, 0, 0};
        }
    }

    std::size_t epochs() const { return epochs_; }
    std::size_t batches_per_epoch() const { return batches_per_epoch_; }
    std::size_t total_steps() const { return total_steps_; } // micro-batches of the whole run
    const petra::learning_rate_schedule& schedule() const { return schedule_; }

    // The rate of the optimizer step that the micro-batches trained so far
    // complete.
    double learning_rate_after(std::size_t steps) const
    {
        return schedule_((steps + accumulation_ - 1) / accumulation_);
    }

    // Whether the position has an epoch to train or finish: an epoch begun
    // (a checkpoint saved after its last micro-batch) is always finished.
    bool epoch_remains(const run_position& position) const
    {
        return position.epoch < epochs_ && (position.batch > 0 || position.steps < total_steps_);
    }

    // Whether the current epoch has a micro-batch left to train.
    bool micro_batch_remains(const run_position& position) const
    {
        return position.batch < batches_per_epoch_ && position.steps < total_steps_;
    }

private:
    // Each epoch ends with a step on its last partial accumulation.
    std::size_t optimizer_steps_in(std::size_t micro_batches) const
    {
        std::size_t steps = 0;
        for (std::size_t left = micro_batches; left > 0;) {
            const std::size_t in_epoch = std::min(left, batches_per_epoch_);
            steps += (in_epoch + accumulation_ - 1) / accumulation_;
            left -= in_epoch;
        }
        return steps;
    }

    std::size_t epochs_;
    std::size_t accumulation_;
    std::size_t batches_per_epoch_;
    std::size_t total_steps_;
    petra::learning_rate_schedule schedule_;
};

// Training time: evaluation and checkpoints are not counted. elapsed() is
// the time since the last restart(), to add to the position's seconds.
class training_clock {
public:
    void restart() { start_ = clock::now(); }
    double elapsed() const { return std::chrono::duration<double>(clock::now() - start_).count(); }

private:
    using clock = std::chrono::steady_clock;
    clock::time_point start_ = clock::now();
};

} // namespace fashion
