// The job's three methods, and the one place that turns the recipe's
// method into a type.
#pragma once

#include <cstddef>
#include <type_traits>

#include <petra/petra.hpp>

#include "method_context.hpp"
#include "model.hpp"
#include "options.hpp"
#include "petra_method.hpp"
#include "sequential_method.hpp"

namespace fashion {

// visit(std::type_identity<M>{}) with PETRA's M for the recipe's stage
// count, from J up to max_stages.
template <std::size_t J = 1, class Visit>
decltype(auto) with_petra_stages(std::size_t stages, Visit&& visit)
{
    if constexpr (J < max_stages) {
        if (stages != J) return with_petra_stages<J + 1>(stages, visit);
    }
    static_assert(training_method<petra_method<J>>);
    return visit(std::type_identity<petra_method<J>>{});
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
    return with_petra_stages(recipe.stages, visit);
}

} // namespace fashion
