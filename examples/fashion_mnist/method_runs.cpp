// One group of the job's runs (method_runs.hpp): the group
// PETRA_JOB_RUN_GROUP of the network PETRA_JOB_NETWORK (a network_kind
// enumerator), which the build sets; with PETRA_JOB_WITH_MPI
// (the build found MPI) also PETRA on MPI ranks. The drivers of one J share
// their stages' code, which is most of the work, hence one translation unit.
#include <cstddef>
#include <type_traits>

#include "method_runs.hpp"
#include "methods.hpp"
#include "training_run.hpp"
#ifdef PETRA_JOB_WITH_MPI
#include "mpi_method.hpp"
#endif

namespace fashion {

template <network_kind Network, std::size_t Group>
job_summary method_runs<Network, Group>::run(const job_options& options, const training_recipe& recipe,
                                             const job_data& data)
{
    using net = network_of<Network>;
    const auto run = [&]<class Method>(std::type_identity<Method>) {
        static_assert(training_method<Method>);
        return training_run<Method>(options, recipe, data).run();
    };
    if constexpr (Group == 0) {
        if (recipe.method == method::backprop) return run(std::type_identity<exact_backprop_method<net>>{});
        if (recipe.method == method::reversible_backprop) {
            return run(std::type_identity<reversible_backprop_method<net>>{});
        }
    }
    constexpr std::size_t first = Group == 0 ? run_groups : Group;
    const auto run_on_stages = [&]<std::size_t J>(std::integral_constant<std::size_t, J>) {
        switch (recipe.driver) {
        case driver::simulator: return run(std::type_identity<petra_on_simulator<net, J>>{});
        case driver::mpi:
#ifdef PETRA_JOB_WITH_MPI
            return run(std::type_identity<mpi_method<net, J>>{});
#else
            refuse_option("--driver mpi: this build of the job has no MPI (install libopenmpi-dev and rebuild).");
#endif
        case driver::threads: break;
        }
        return run(std::type_identity<petra_on_threads<net, J>>{});
    };
    return with_stage_count<first, run_groups>(recipe.stages, run_on_stages);
}

template struct method_runs<network_kind::PETRA_JOB_NETWORK, PETRA_JOB_RUN_GROUP>;

} // namespace fashion
