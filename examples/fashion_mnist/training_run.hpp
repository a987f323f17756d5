// One run of one method, by petra's training loop: from a fresh start (or
// the --init-weights file) or its checkpoint to the end of its budget, or
// until a stop is requested. What is the job's own: its recipe in the
// checkpoint, its outputs (the progress bar, the metrics and fidelity
// files, the weights files, the summary) and the test set it scores on.
#pragma once

#include <cstddef>
#include <string>

#include <petra/interchange/npz.hpp>
#include <petra/interchange/onnx.hpp>
#include <petra/petra.hpp>
#include <petra/train/progress.hpp>

#include "data.hpp"
#include "evaluation.hpp"
#include "method_context.hpp"
#include "metrics_files.hpp"
#include "options.hpp"
#include "run_checkpoint.hpp"
#include "run_progress.hpp"
#include "summary.hpp"

namespace fashion {

template <training_method Method>
class training_run {
public:
    training_run(const job_options& options, const training_recipe& recipe, const job_data& data)
        : options_(options), recipe_(recipe), data_(data),
          source_(training_micro_batches(recipe, data.train, data.train_size)),
          plan_(recipe.plan(source_.batches_per_epoch())), progress_(options.quiet, plan_, recipe.global_batch()),
          method_(method_context{recipe, plan_.schedule(), options.fidelity_every, fidelity_}),
          loop_(method_, source_, plan_,
                {.checkpoint_path = options.checkpoint_path,
                 .checkpoint_every = options.checkpoint_every,
                 .stop_requested = options.stop_requested},
                callbacks())
    {}
    training_run(const training_run&) = delete; // the loop and the method hold references into the run
    training_run& operator=(const training_run&) = delete;

    // Throws petra::checkpoint_error for a bad or missing checkpoint,
    // std::invalid_argument for one of another recipe, and whatever
    // training throws.
    job_summary run()
    {
        if (options_.resume && !loop_.restore()) {
            throw petra::checkpoint_error("checkpoint '" + options_.checkpoint_path + "' cannot be opened.");
        }
        if (options_.resume) progress_.resumed(loop_.position(), options_.checkpoint_path);
        else weights_files(false);
        open_files();
        const bool finished = loop_.run();
        if (finished) weights_files(true);
        return summary(finished);
    }

private:
    petra::training_callbacks callbacks()
    {
        return {.trained = [this](const auto& position, const auto& so_far) { progress_.trained(position, so_far); },
                .evaluate =
                    [this] {
                        const evaluation test = method_.evaluate(data_.test, data_.test_size);
                        return petra::test_score{test.loss, test.accuracy};
                    },
                .epoch_finished =
                    [this](const epoch_record& record) {
                        progress_.epoch_done(record);
                        metrics_.write(record);
                    },
                .checkpoint_saved = options_.checkpoint_saved,
                .save_records = [this](auto& out) { transfer_recipe(out, recipe_, plan_.batches_per_epoch()); },
                .load_records = [this](auto& in) { transfer_recipe(in, recipe_, plan_.batches_per_epoch()); }};
    }

    // The weights files, read at the start (--init-weights) or written at
    // the end (--save-weights, --export-onnx) while nothing runs;
    // checked_recipe refuses them where the method holds no whole network.
    void weights_files(bool at_end)
    {
        if constexpr (requires { method_.parameters(); }) {
            [[maybe_unused]] const auto paused = method_.pause();
            auto& parameters = method_.parameters();
            if (!at_end && !options_.init_weights_path.empty()) petra::load_npz(options_.init_weights_path, parameters);
            if (at_end && !options_.save_weights_path.empty()) petra::save_npz(options_.save_weights_path, parameters);
            if (at_end && !options_.onnx_path.empty()) petra::export_onnx(parameters, options_.onnx_path);
        }
    }

    // Rewritten from the position: a resumed run's files hold what its
    // checkpoint covers, no more.
    void open_files()
    {
        metrics_.open(options_.metrics_path, recipe_, loop_.epochs());
        if (options_.fidelity_every == 0) return;
        const std::string fidelity_path = fidelity_path_of(options_.metrics_path);
        if (options_.resume) fidelity_.reopen(fidelity_path, recipe_, loop_.position().steps);
        else fidelity_.open(fidelity_path, recipe_);
    }

    job_summary summary(bool finished)
    {
        job_summary summary = summary_of(recipe_, loop_.position(), loop_.epochs(), finished);
        summary.peak_rss_bytes = petra::peak_rss_bytes();
        summary.cache_sizes = petra::kernels::cache_sizes_text(petra::kernels::this_core_caches());
        summary.parameter_digest = method_.digest();
        if constexpr (requires { method_.ranks(); }) summary.ranks = std::size_t(method_.ranks());
        summary.checkpoint_bytes = loop_.last_checkpoint_bytes();
        summary.checkpoint_seconds = loop_.last_checkpoint_seconds();
        return summary;
    }

    const job_options& options_;
    const training_recipe& recipe_;
    const job_data& data_;
    petra::dataset_source<image> source_;
    petra::training_plan plan_;
    run_progress progress_;
    fidelity_file fidelity_; // before the method, which writes to it
    Method method_;
    metrics_file metrics_;
    petra::training_loop<Method, petra::dataset_source<image>> loop_;
};

} // namespace fashion
