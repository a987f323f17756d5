// One run of the method a recipe names, compiled apart from the programs
// that ask for it. Every method type instantiates a whole trainer or
// pipeline of the reference network (PETRA in J = 1 to 10 stages on two
// drivers, three with MPI), too much for one translation unit: the runs
// are split into run_groups groups, each compiled once in a translation
// unit of its own (method_runs.cpp, mpi_runs.cpp; examples/CMakeLists.txt
// builds them in parallel into libraries that the job and its test share).
#pragma once

#include <cstddef>

#include "data.hpp"
#include "options.hpp"
#include "summary.hpp"

namespace fashion {

// Group g runs PETRA in J stages for every J with J % run_groups == g;
// group 0 also runs exact and reversible backprop. The build compiles
// groups 0 to run_groups - 1 (examples/CMakeLists.txt says the same count:
// with fewer, the job does not link; with more, a group does not compile).
inline constexpr std::size_t run_groups = 4;
static_assert(run_groups <= max_stages, "Every group runs at least one stage count.");

// The group that runs the recipe's method.
constexpr std::size_t run_group(const training_recipe& recipe)
{
    return recipe.method == method::petra ? recipe.stages % run_groups : 0;
}

// training_run<Method>(options, recipe, data).run() with the recipe's
// method, on threads or the simulator; run_group(recipe) must be Group.
template <std::size_t Group>
struct method_runs {
    static job_summary run(const job_options& options, const training_recipe& recipe, const job_data& data);
};

// The same for PETRA on MPI ranks (the recipe's driver is mpi), in builds
// that link MPI (mpi_runs.cpp).
template <std::size_t Group>
struct mpi_runs {
    static job_summary run(const job_options& options, const training_recipe& recipe, const job_data& data);
};

} // namespace fashion
