// The job's methods as types, and the visit that turns PETRA's stage count
// into one. Only the translation units that compile the runs include this
// (method_runs.cpp, mpi_runs.cpp): each method type instantiates a whole
// trainer or pipeline of the reference network.
#pragma once

#include <cstddef>
#include <type_traits>

#include <petra/petra.hpp>

#include "model.hpp"
#include "options.hpp"
#include "petra_method.hpp"
#include "sequential_method.hpp"

namespace fashion {

using exact_backprop_method = sequential_method<petra::exact_backprop<net, float>>;
using reversible_backprop_method = sequential_method<petra::reversible_backprop<net, float>>;
// PETRA in J stages, one thread each or on the sequential simulator: the
// same numbers (tests/job/test_fashion_job.cpp).
template <std::size_t J>
using petra_on_threads = petra_method<J, petra::thread_pipeline>;
template <std::size_t J>
using petra_on_simulator = petra_method<J, petra::sequential_pipeline>;

// visit(std::integral_constant<std::size_t, J>{}) with J = stages, for a
// stage count among First, First + Step, ... up to max_stages; another is
// visited as the last of them (the caller checks). E.g. First = 2, Step = 4
// visits 2, 6 or 10 on the reference network.
template <std::size_t First, std::size_t Step = 1, class Visit>
decltype(auto) with_stage_count(std::size_t stages, Visit&& visit)
{
    static_assert(1 <= First && First <= max_stages && Step >= 1);
    if constexpr (First + Step <= max_stages) {
        if (stages != First) return with_stage_count<First + Step, Step>(stages, visit);
    }
    return visit(std::integral_constant<std::size_t, First>{});
}

} // namespace fashion
