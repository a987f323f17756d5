// One run of the method a recipe names, compiled apart from the programs
// that ask for it. Every method type instantiates a whole trainer or
// pipeline of one network (PETRA in J = 1 to 10 stages on two drivers,
// three with MPI, for each of the two networks), too much for one
// translation unit: the runs are split into groups, one per network and
// part of the stage counts, each compiled once in a translation unit of its
// own (method_runs.cpp; method_runs.cmake builds them in parallel into the
// library fashion_mnist_runs, which the job and its test link).
#pragma once

#include <cstddef>

#include "data.hpp"
#include "options.hpp"
#include "summary.hpp"

namespace fashion {

// For each network, group g runs PETRA in J stages, on every driver, for
// every J with J % run_groups == g; its group 0 also runs exact and
// reversible backprop. The build compiles groups 0 to run_groups - 1 of
// each network (method_runs.cmake says the same count: with fewer, the job
// does not link; with more, a group does not compile). More groups compile
// in parallel, but each parses the headers again (about 9 s): 2 keeps the
// total close to one unit's per network.
inline constexpr std::size_t run_groups = 2;
static_assert(run_groups <= max_stages, "Every group runs at least one stage count.");
inline constexpr std::size_t network_kinds = network_names.size();

// The group that runs the recipe's method on its network.
constexpr std::size_t run_group(const training_recipe& recipe)
{
    return recipe.method == method::petra ? recipe.stages % run_groups : 0;
}

// training_run<Method>(options, recipe, data).run() with the recipe's
// method on the recipe's network; recipe.network must be Network and
// run_group(recipe) Group. Throws std::invalid_argument for --driver mpi in
// a build without MPI.
template <network_kind Network, std::size_t Group>
struct method_runs {
    static job_summary run(const job_options& options, const training_recipe& recipe, const job_data& data);
};

} // namespace fashion
