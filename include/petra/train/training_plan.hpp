// A run's plan (floor 8): its budget in micro-batches and its learning-rate
// schedule in optimizer steps, fixed by the epochs, the data's micro-batches
// per epoch and the accumulation factor. The training loop follows it; the
// method's optimizer reads schedule().
//
//   training_plan plan({.epochs = 3, .batches_per_epoch = 100, .accumulation = 2},
//                      {.peak = 0.05, .warmup_epochs = 0.5, .shape = decay::cosine});
//   plan.total_micro_batches() == 300; plan.schedule().total_steps == 150
//   (each epoch ends with a step on its last partial accumulation).
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>

#include <petra/error.hpp>
#include <petra/optim/schedule.hpp>

namespace petra {

struct training_budget {
    std::size_t epochs = 1;
    std::size_t batches_per_epoch = 1; // the data source's
    std::size_t accumulation = 1;      // micro-batches per optimizer step
    std::size_t max_micro_batches = 0; // a cap on the whole run; 0: none
};

// The schedule's shape in epochs; the plan turns it into optimizer steps.
// decay::step divides at half and at three quarters of the run.
struct schedule_settings {
    double peak = 0.1;
    double warmup_epochs = 0;
    learning_rate_schedule::decay shape = learning_rate_schedule::decay::constant;
};

class training_plan {
public:
    // Raises invalid_argument for an empty budget.
    training_plan(const training_budget& budget, const schedule_settings& settings) : budget_(budget)
    {
        if (budget.epochs == 0 || budget.batches_per_epoch == 0 || budget.accumulation == 0) {
            raise_error(error_kind::invalid_argument,
                        "training_plan: epochs, micro-batches per epoch and accumulation must be at least 1 (" +
                            std::to_string(budget.epochs) + ", " + std::to_string(budget.batches_per_epoch) + ", " +
                            std::to_string(budget.accumulation) + ").");
        }
        total_ = budget.epochs * budget.batches_per_epoch;
        if (budget.max_micro_batches != 0) total_ = std::min(total_, budget.max_micro_batches);
        const std::size_t optimizer_steps = optimizer_steps_in(total_);
        schedule_.peak = settings.peak;
        schedule_.warmup_steps =
            std::size_t(settings.warmup_epochs * double(budget.batches_per_epoch) / double(budget.accumulation));
        schedule_.total_steps = optimizer_steps;
        schedule_.shape = settings.shape;
        if (settings.shape == learning_rate_schedule::decay::step) {
            schedule_.milestones = {optimizer_steps / 2, optimizer_steps * 3 / 4, 0, 0};
        }
    }

    const training_budget& budget() const { return budget_; }
    std::size_t epochs() const { return budget_.epochs; }
    std::size_t batches_per_epoch() const { return budget_.batches_per_epoch; }
    std::size_t total_micro_batches() const { return total_; }
    const learning_rate_schedule& schedule() const { return schedule_; }

    // The rate of the optimizer step that `micro_batches` trained so far
    // complete.
    double learning_rate_after(std::size_t micro_batches) const
    {
        return schedule_((micro_batches + budget_.accumulation - 1) / budget_.accumulation);
    }

    // Whether a run at (epoch, batch, steps) has an epoch to train or to
    // finish: an epoch begun (saved after its last micro-batch) is always
    // finished.
    bool epoch_remains(std::size_t epoch, std::size_t batch, std::size_t steps) const
    {
        return epoch < budget_.epochs && (batch > 0 || steps < total_);
    }
    // Whether the current epoch has a micro-batch left to train.
    bool micro_batch_remains(std::size_t batch, std::size_t steps) const
    {
        return batch < budget_.batches_per_epoch && steps < total_;
    }

private:
    std::size_t optimizer_steps_in(std::size_t micro_batches) const
    {
        std::size_t steps = 0;
        for (std::size_t left = micro_batches; left > 0;) {
            const std::size_t in_epoch = std::min(left, budget_.batches_per_epoch);
            steps += (in_epoch + budget_.accumulation - 1) / budget_.accumulation;
            left -= in_epoch;
        }
        return steps;
    }

    training_budget budget_;
    std::size_t total_ = 0;
    learning_rate_schedule schedule_;
};

} // namespace petra
