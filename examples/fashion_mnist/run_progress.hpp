// Progress on stderr for people watching a run (nothing when quiet): the
// bar or plain lines while training, a line per finished epoch with its test
// score, and where a resumed run starts.
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>

#include <petra/petra.hpp>
#include <petra/train/progress.hpp>

#include "run_state.hpp"

namespace fashion {

class run_progress {
public:
    run_progress(bool quiet, const petra::training_plan& plan, std::size_t batch)
        : quiet_(quiet), epochs_(plan.epochs()), total_steps_(plan.total_micro_batches()),
          reporter_(plan.total_micro_batches(), batch)
    {}

    bool quiet() const { return quiet_; }

    // After each micro-batch, with the epoch's statistics so far.
    void trained(const run_position& position, const petra::epoch_statistics& so_far)
    {
        if (quiet_) return;
        reporter_.update(position.epoch + 1, epochs_, position.steps, so_far.mean_loss(), so_far.accuracy());
    }

    void epoch_done(const epoch_record& record)
    {
        if (quiet_) return;
        char test[96];
        std::snprintf(test, sizeof test, "  test loss %.4f  test accuracy %.2f%%", record.test_loss,
                      100.0 * record.test_accuracy);
        reporter_.epoch_done(record.epoch, epochs_, record.steps, record.train_loss, record.train_accuracy, test);
    }

    // A run resumed from a checkpoint: its speed counts from here.
    void resumed(const run_position& position, const std::string& checkpoint_path)
    {
        reporter_.resumed_at(position.steps);
        if (quiet_) return;
        std::fprintf(stderr, "resumed from %s at epoch %zu, micro-batch %zu (step %zu of %zu)\n",
                     checkpoint_path.c_str(), position.epoch + 1, position.batch, position.steps, total_steps_);
    }

private:
    bool quiet_;
    std::size_t epochs_;
    std::size_t total_steps_;
    petra::progress_reporter reporter_;
};

} // namespace fashion
