// The run's summary: what main reports and tests check, and the one JSON
// line written to stdout and to --summary PATH.
#pragma once

#include <cmath>
#include <cstddef>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "options.hpp"
#include "run_state.hpp"

namespace fashion {

struct job_summary {
    training_recipe recipe;
    // The first block of each stage, then the block count: PETRA's cut of
    // the network ([0, blocks] for the sequential methods).
    std::vector<std::size_t> cuts;
    std::size_t ranks = 1; // processes (MPI ranks) the run was spread over
    std::size_t steps = 0; // micro-batches trained
    std::size_t epochs_run = 0;
    double test_accuracy = 0, test_loss = 0, train_seconds = 0, examples_per_second = 0;
    std::size_t peak_rss_bytes = 0;
    std::string cache_sizes; // the caches the kernels blocked for (PETRA_CACHE_SIZES sets them)
    std::vector<epoch_record> epochs;
    bool interrupted = false;                           // stopped on request before the end
    std::size_t position_epoch = 0, position_batch = 0; // where it stopped: the next micro-batch
    std::string parameter_digest;                       // of the final parameters and statistics
    std::size_t checkpoint_bytes = 0;                   // the last checkpoint saved, if any
    double checkpoint_seconds = 0;                      // and how long saving it took
};

// The summary of a run at `position`, with `epochs` finished: finished or
// stopped on request. The caller adds the figures of its method and files.
inline job_summary summary_of(const training_recipe& recipe, const run_position& position,
                              const std::vector<epoch_record>& epochs, bool finished)
{
    job_summary summary;
    summary.recipe = recipe;
    summary.steps = position.steps;
    summary.epochs_run = epochs.size();
    summary.epochs = epochs;
    summary.interrupted = !finished;
    summary.position_epoch = position.epoch;
    summary.position_batch = position.batch;
    summary.train_seconds = position.training_seconds;
    summary.examples_per_second =
        summary.train_seconds > 0 ? double(summary.steps * recipe.global_batch()) / summary.train_seconds : 0;
    if (!epochs.empty()) {
        summary.test_loss = epochs.back().test_loss;
        summary.test_accuracy = epochs.back().test_accuracy;
    }
    return summary;
}

// value rounded to `decimals` places: the summary shows what is measured,
// not float noise.
inline double rounded(double value, int decimals)
{
    const double scale = std::pow(10.0, decimals);
    return std::round(value * scale) / scale;
}

// The summary's fields in a fixed order, for readers and for diffs.
inline nlohmann::ordered_json summary_json(const job_summary& summary)
{
    const training_recipe& recipe = summary.recipe;
    nlohmann::ordered_json json;
    json["network"] = std::string(name_of(recipe.network));
    json["method"] = std::string(name_of(recipe.method));
    json["stages"] = recipe.stages;
    json["cuts"] = summary.cuts;
    json["driver"] = recipe.method == method::petra ? std::string(name_of(recipe.driver)) : "none";
    json["ranks"] = summary.ranks;
    json["replicas"] = recipe.replicas;
    json["accumulation"] = recipe.accumulation;
    json["epochs"] = summary.epochs_run;
    json["steps"] = summary.steps;
    json["batch"] = recipe.batch;
    json["seed"] = recipe.seed;
    json["learning_rate"] = recipe.learning_rate;
    json["warmup_epochs"] = recipe.warmup_epochs;
    json["delay_rate_exponent"] = recipe.delay_rate_exponent;
    json["precision"] = petra::precision_name(recipe.precision);
    json["test_accuracy"] = rounded(summary.test_accuracy, 4);
    json["test_loss"] = rounded(summary.test_loss, 4);
    json["train_seconds"] = rounded(summary.train_seconds, 1);
    json["examples_per_second"] = rounded(summary.examples_per_second, 1);
    json["peak_rss_bytes"] = summary.peak_rss_bytes;
    json["cache_sizes"] = summary.cache_sizes;
    json["parameter_digest"] = summary.parameter_digest;
    return json;
}

// The JSON on one line, a space after each ':' and ',': {"method": "petra",
// "stages": 4, ...}. Line-oriented readers (scripts, the signal test) rely
// on both.
inline std::string summary_line(const job_summary& summary)
{
    // With an indent, the dump puts each field, and each element of an
    // array, on its own line; a string never holds a raw newline (it is
    // escaped), so every newline follows a ',' (a space takes its place)
    // or a bracket (dropped).
    std::string line;
    for (const char c : summary_json(summary).dump(0)) {
        if (c != '\n') line += c;
        else if (line.back() == ',') line += ' ';
    }
    return line;
}

inline void write_summary(const std::string& path, const job_summary& summary)
{
    std::ofstream out(path);
    if (!out) throw std::runtime_error(path + ": cannot write the summary file.");
    out << summary_line(summary) << '\n';
}

} // namespace fashion
