// One group of the job's runs on threads or the simulator (method_runs.hpp):
// the group PETRA_JOB_RUN_GROUP names, which the build sets.
#include <cstddef>
#include <type_traits>

#include "method_runs.hpp"
#include "methods.hpp"
#include "training_run.hpp"

namespace fashion {

template <std::size_t Group>
job_summary method_runs<Group>::run(const job_options& options, const training_recipe& recipe,
                                    const job_data& data)
{
    const auto run = [&]<class Method>(std::type_identity<Method>) {
        static_assert(training_method<Method>);
        return training_run<Method>(options, recipe, data).run();
    };
    if constexpr (Group == 0) {
        if (recipe.method == method::backprop) return run(std::type_identity<exact_backprop_method>{});
        if (recipe.method == method::reversible_backprop) return run(std::type_identity<reversible_backprop_method>{});
    }
    constexpr std::size_t first = Group == 0 ? run_groups : Group;
    return with_stage_count<first, run_groups>(recipe.stages, [&]<std::size_t J>(std::integral_constant<std::size_t, J>) {
        if (recipe.driver == driver::simulator) return run(std::type_identity<petra_on_simulator<J>>{});
        return run(std::type_identity<petra_on_threads<J>>{});
    });
}

template struct method_runs<PETRA_JOB_RUN_GROUP>;

} // namespace fashion
