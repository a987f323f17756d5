// The Fashion-MNIST job: the reference network or its reversible variant
// (--network) trained with PETRA (J stages on J threads, on the simulator,
// or on MPI ranks), exact backprop or reversible backprop, from the same
// data, seed, optimizer and schedule, then scored on the test set. The
// command-line front end is main.cpp; tests call run_job directly on
// generated data.
//
// Its parts, each usable alone: options.hpp (what a user asks, checked into
// a recipe), data.hpp, run_checkpoint.hpp (the recipe in the checkpoint),
// methods.hpp (PETRA and the sequential baselines), training_run.hpp (a run
// by petra's training loop), evaluation.hpp, and the outputs:
// run_progress.hpp, metrics_files.hpp, summary.hpp. The runs of every method
// are compiled apart (method_runs.hpp): a program that includes this header
// links the job's method libraries (examples/CMakeLists.txt).
#pragma once

#include <array>
#include <cstddef>
#include <utility>
#include <vector>

#include "data.hpp"
#include "method_runs.hpp"
#include "metrics_files.hpp"
#include "model.hpp"
#include "options.hpp"
#include "run_checkpoint.hpp"
#include "summary.hpp"

namespace fashion {

// One run of the recipe's method, by the group that compiled it: runs[n]
// holds network n's groups.
inline job_summary run_method(const job_options& options, const training_recipe& recipe, const job_data& data)
{
    using run = job_summary (*)(const job_options&, const training_recipe&, const job_data&);
    using network_runs = std::array<run, run_groups>;
    constexpr auto groups_of = []<network_kind Network, std::size_t... G>(std::index_sequence<G...>)
    {
        return network_runs{&method_runs<Network, G>::run...};
    };
    constexpr std::array<network_runs, network_kinds> runs{
        groups_of.template operator()<network_kind::reference>(std::make_index_sequence<run_groups>{}),
        groups_of.template operator()<network_kind::reversible>(std::make_index_sequence<run_groups>{})};
    static_assert(network_kinds == 2 && std::size_t(network_kind::reversible) == 1,
                  "runs has one row per network kind, in the enumeration's order.");
    return runs[std::size_t(recipe.network)][run_group(recipe)](options, recipe, data);
}

// The cut of the recipe's network into its stages (one stage for the
// sequential methods), as the summary records it.
inline std::vector<std::size_t> recipe_cuts(const training_recipe& recipe)
{
    return recipe.network == network_kind::reference ? cuts_at<reference_net>(recipe.stages)
                                                     : cuts_at<reversible_net>(recipe.stages);
}

// Loads the data, trains (from a checkpoint with options.resume),
// evaluates after every epoch, writes the metrics file and returns the
// summary; summary.interrupted if options.stop_requested stopped it (the
// checkpoint, if any, saved). Throws std::invalid_argument for bad options
// (and for a checkpoint of other options), petra::data_error for bad data,
// petra::checkpoint_error for a bad checkpoint, and whatever training
// throws (a non-finite loss names its stage).
inline job_summary run_job(const job_options& options)
{
    const training_recipe recipe = checked_recipe(options);
    check_checkpoint_options(options);
    job_data data = options.loads_data ? load_data(options.data_dir, recipe.global_batch()) : job_data{};
    if (options.share_data_sizes) options.share_data_sizes(data.train_size, data.test_size);
    job_summary summary = run_method(options, recipe, data);
    summary.cuts = recipe_cuts(recipe);
    if (!options.summary_path.empty() && !summary.interrupted) write_summary(options.summary_path, summary);
    return summary;
}

} // namespace fashion
