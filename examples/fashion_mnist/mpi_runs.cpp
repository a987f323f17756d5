// One group of the job's runs on MPI ranks (method_runs.hpp): the group
// PETRA_JOB_RUN_GROUP names, which the build sets when it finds MPI.
#include <cstddef>
#include <type_traits>

#include "method_runs.hpp"
#include "methods.hpp"
#include "mpi_method.hpp"
#include "training_run.hpp"

namespace fashion {

template <std::size_t Group>
job_summary mpi_runs<Group>::run(const job_options& options, const training_recipe& recipe, const job_data& data)
{
    constexpr std::size_t first = Group == 0 ? run_groups : Group;
    return with_stage_count<first, run_groups>(recipe.stages, [&]<std::size_t J>(std::integral_constant<std::size_t, J>) {
        static_assert(training_method<mpi_method<J>>);
        return training_run<mpi_method<J>>(options, recipe, data).run();
    });
}

template struct mpi_runs<PETRA_JOB_RUN_GROUP>;

} // namespace fashion
