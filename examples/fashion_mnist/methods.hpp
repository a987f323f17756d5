// The job's methods, and the one place that turns the recipe's method (and
// PETRA's driver and stage count) into a type.
#pragma once

#include <cstddef>
#include <type_traits>

#include <petra/petra.hpp>

#include "method_context.hpp"
#include "model.hpp"
#include "options.hpp"
#include "petra_method.hpp"
#include "sequential_method.hpp"
#ifdef PETRA_JOB_WITH_MPI
#include "mpi_method.hpp"
#endif

namespace fashion {

// Whether this build of the job runs PETRA on MPI ranks (it links MPI).
#ifdef PETRA_JOB_WITH_MPI
inline constexpr bool job_with_mpi = true;
#else
inline constexpr bool job_with_mpi = false;
#endif

// visit(std::type_identity<M>{}) with PETRA's M for J stages on the
// driver, J from Stages up to max_stages.
template <std::size_t J = 1, class Visit>
decltype(auto) with_petra_stages(std::size_t stages, driver runner, Visit&& visit)
{
    if constexpr (J < max_stages) {
        if (stages != J) return with_petra_stages<J + 1>(stages, runner, visit);
    }
    using threads = petra_method<J, petra::thread_pipeline>;
    using simulator = petra_method<J, petra::sequential_pipeline>;
    static_assert(training_method<threads> && training_method<simulator>);
    switch (runner) {
    case driver::simulator: return visit(std::type_identity<simulator>{});
    case driver::mpi:
#ifdef PETRA_JOB_WITH_MPI
        static_assert(training_method<mpi_method<J>>);
        return visit(std::type_identity<mpi_method<J>>{});
#else
        refuse_option("--driver mpi: this build of the job has no MPI (install libopenmpi-dev and rebuild).");
#endif
    case driver::threads: break;
    }
    return visit(std::type_identity<threads>{});
}

// visit(std::type_identity<M>{}) with the method type M the recipe names.
template <class Visit>
decltype(auto) with_method(const training_recipe& recipe, Visit&& visit)
{
    using exact = sequential_method<petra::exact_backprop<net, float>>;
    using reversible = sequential_method<petra::reversible_backprop<net, float>>;
    static_assert(training_method<exact> && training_method<reversible>);
    switch (recipe.method) {
    case method::backprop: return visit(std::type_identity<exact>{});
    case method::reversible_backprop: return visit(std::type_identity<reversible>{});
    case method::petra: break;
    }
    return with_petra_stages(recipe.stages, recipe.driver, visit);
}

} // namespace fashion
