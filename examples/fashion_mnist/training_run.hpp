// One run of one method: from a fresh start or its checkpoint to the end of
// its budget, or until a stop is requested. Each epoch is trained, drained,
// scored on the test set and recorded; the checkpoint (when asked) is saved
// every checkpoint_every micro-batches, at a stop and at the end.
#pragma once

#include <cstddef>
#include <string>

#include <petra/interchange/npz.hpp>
#include <petra/interchange/onnx.hpp>
#include <petra/petra.hpp>
#include <petra/train/progress.hpp>

#include "data.hpp"
#include "digest.hpp"
#include "evaluation.hpp"
#include "method_context.hpp"
#include "metrics_files.hpp"
#include "options.hpp"
#include "run_checkpoint.hpp"
#include "run_progress.hpp"
#include "run_state.hpp"
#include "summary.hpp"

namespace fashion {

template <training_method Method>
class training_run {
public:
    training_run(const job_options& options, const training_recipe& recipe, const job_data& data)
        : options_(options), recipe_(recipe), data_(data), batches_(recipe, data.train, data.train_size),
          plan_(recipe, batches_.per_epoch()), progress_(options.quiet, plan_, recipe.batch),
          method_(method_context{recipe, plan_.schedule(), options.fidelity_every, fidelity_}),
          checkpoint_(options.checkpoint_path, recipe, plan_.batches_per_epoch(), Method::network::signature)
    {
    }
    training_run(const training_run&) = delete; // the method holds references into the run
    training_run& operator=(const training_run&) = delete;

    // Throws petra::checkpoint_error for a bad checkpoint,
    // std::invalid_argument for one of another recipe, and whatever
    // training throws.
    job_summary run()
    {
        if (options_.resume) resume();
        else load_initial_weights();
        open_files();
        clock_.restart();
        const bool finished = train();
        if (finished) write_weights();
        return summary(finished);
    }

private:
    void resume()
    {
        checkpoint_.load(position_, method_);
        progress_.resumed(position_, checkpoint_.path());
    }

    // --init-weights (checked_recipe refuses it where the method holds no
    // whole network, as on MPI ranks).
    void load_initial_weights()
    {
        if constexpr (requires { method_.parameters(); }) {
            if (options_.init_weights_path.empty()) return;
            [[maybe_unused]] const auto paused = method_.pause(); // nothing runs while the weights are read or written
            petra::load_npz(options_.init_weights_path, method_.parameters());
        }
    }
    // --save-weights and --export-onnx, at the end.
    void write_weights()
    {
        if constexpr (requires { method_.parameters(); }) {
            [[maybe_unused]] const auto paused = method_.pause(); // nothing runs while the weights are read or written
            if (!options_.save_weights_path.empty()) petra::save_npz(options_.save_weights_path, method_.parameters());
            if (!options_.onnx_path.empty()) petra::export_onnx(method_.parameters(), options_.onnx_path);
        }
    }

    // Rewritten from the position: a resumed run's files hold what its
    // checkpoint covers, no more.
    void open_files()
    {
        metrics_.open(options_.metrics_path, recipe_, position_.epochs);
        if (options_.fidelity_every == 0) return;
        const std::string fidelity_path = fidelity_path_of(options_.metrics_path);
        if (options_.resume) {
            fidelity_.reopen(fidelity_path, recipe_, position_.steps);
        } else {
            fidelity_.open(fidelity_path, recipe_);
        }
    }

    // Returns false if stopped.
    bool train()
    {
        for (; plan_.epoch_remains(position_); ++position_.epoch) {
            if (!train_epoch()) return false;
            finish_epoch(method_.end_epoch());
            position_.batch = 0;
        }
        save_checkpoint();
        return true;
    }

    // The current epoch's micro-batches from the position on; false if a
    // stop was requested (the checkpoint saved).
    bool train_epoch()
    {
        batches_.start_epoch(position_.epoch);
        if (position_.batch == 0) {
            position_.generator.seed(micro_batches::augmentation_seed(recipe_.seed, position_.epoch));
        }
        while (plan_.micro_batch_remains(position_)) {
            if (options_.stop_requested && options_.stop_requested()) {
                save_checkpoint();
                return false;
            }
            method_.train(method_.reads_data() ? batches_.load(position_.batch, position_.generator)
                                               : batches_.not_loaded(),
                          position_);
            ++position_.batch;
            ++position_.steps;
            // On every process: on MPI ranks the statistics travel to rank 0 (mpi_method.hpp).
            const petra::epoch_statistics so_far = method_.progress();
            if (!progress_.quiet()) progress_.trained(position_, so_far);
            if (options_.checkpoint_every != 0 && position_.steps % options_.checkpoint_every == 0) save_checkpoint();
        }
        return true;
    }

    // Scores and records the epoch the method has just finished.
    void finish_epoch(const petra::epoch_statistics& statistics)
    {
        position_.training_seconds += clock_.elapsed();
        const evaluation test = method_.evaluate(data_.test, data_.test_size);
        const epoch_record record{.epoch = position_.epoch + 1,
                                  .steps = position_.steps,
                                  .train_loss = statistics.mean_loss(),
                                  .train_accuracy = statistics.accuracy(),
                                  .test_loss = test.loss,
                                  .test_accuracy = test.accuracy,
                                  .seconds = position_.training_seconds,
                                  .learning_rate = plan_.learning_rate_after(position_.steps)};
        position_.epochs.push_back(record);
        progress_.epoch_done(record);
        metrics_.write(record);
        clock_.restart(); // evaluation is not training time
    }

    void save_checkpoint()
    {
        if (!checkpoint_.enabled()) return;
        checkpoint_.save(position_, clock_, method_);
        if (options_.checkpoint_saved) options_.checkpoint_saved(position_.steps);
    }

    job_summary summary(bool finished)
    {
        job_summary summary;
        summary.recipe = recipe_;
        summary.steps = position_.steps;
        summary.epochs_run = position_.epochs.size();
        summary.epochs = position_.epochs;
        summary.interrupted = !finished;
        summary.position_epoch = position_.epoch;
        summary.position_batch = position_.batch;
        summary.train_seconds = position_.training_seconds;
        summary.examples_per_second =
            summary.train_seconds > 0 ? double(summary.steps * recipe_.batch) / summary.train_seconds : 0;
        if (!summary.epochs.empty()) {
            summary.test_loss = summary.epochs.back().test_loss;
            summary.test_accuracy = summary.epochs.back().test_accuracy;
        }
        summary.peak_rss_bytes = petra::peak_rss_bytes();
        summary.parameter_digest = method_.digest();
        if constexpr (requires { method_.ranks(); }) summary.ranks = std::size_t(method_.ranks());
        summary.checkpoint_bytes = checkpoint_.last_bytes();
        summary.checkpoint_seconds = checkpoint_.last_seconds();
        return summary;
    }

    const job_options& options_;
    const training_recipe& recipe_;
    const job_data& data_;
    micro_batches batches_;
    run_plan plan_;
    run_progress progress_;
    fidelity_file fidelity_; // before the method, which writes to it
    Method method_;
    run_checkpoint checkpoint_;
    metrics_file metrics_;
    run_position position_;
    training_clock clock_;
};

} // namespace fashion
