// The job's methods as types, and the visits that turn the network and
// PETRA's stage count into them. Only the translation unit that compiles the
// runs includes this (method_runs.cpp): each method type instantiates a
// whole trainer or pipeline of a network.
#pragma once

#include <cstddef>
#include <type_traits>

#include <petra/petra.hpp>

#include "model.hpp"
#include "options.hpp"
#include "petra_method.hpp"
#include "sequential_method.hpp"

namespace fashion {

template <class Net>
using exact_backprop_method = sequential_method<Net, petra::exact_backprop<Net, float>>;
template <class Net>
using reversible_backprop_method = sequential_method<Net, petra::reversible_backprop<Net, float>>;
// PETRA in J stages, one thread each or on the sequential simulator: the
// same numbers (tests/job/test_fashion_job.cpp).
template <class Net, std::size_t J>
using petra_on_threads = petra_method<Net, J, petra::thread_pipeline>;
template <class Net, std::size_t J>
using petra_on_simulator = petra_method<Net, J, petra::sequential_pipeline>;

// The network type of a network_kind.
template <network_kind Kind>
using network_of = std::conditional_t<Kind == network_kind::reference, reference_net, reversible_net>;

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
