// The project's one type list (floor 2): a Boost.Hana tuple of types,
// hana::tuple_t<T...>. A chain's layers and a network's blocks are such
// lists, so a user computes over them with Hana's algorithms:
//
//   namespace hana = boost::hana;
//   constexpr auto kept = hana::filter(net::blocks, [](auto block) {
//       return hana::bool_c<!decltype(block)::type::reversible>;
//   });                                    // the blocks that keep their input
//
// Also here: the element of a list at an index, and visits of the indices
// 0 .. N-1 in order or in reverse, which is how the floors above run through
// the layers of a chain, the blocks of a stage or the stages of a pipeline.
#pragma once

#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>

#include <boost/hana/tuple.hpp>
#include <boost/hana/type.hpp>

namespace petra {

// The type list of Types..., a value: type_list<int, float> is
// hana::tuple<hana::type<int>, hana::type<float>>{}.
template <class... Types>
inline constexpr auto type_list = boost::hana::tuple_t<Types...>;

namespace detail {
template <std::size_t Index, class List>
struct type_at_impl;
template <std::size_t Index, class... Elements>
struct type_at_impl<Index, boost::hana::tuple<Elements...>> {
    using type = typename std::tuple_element_t<Index, std::tuple<Elements...>>::type;
};
} // namespace detail

// The type at Index of a type list of type List. (Read from the list's type:
// hana::at_c would instantiate an accessor per element, which costs compile
// time for nothing here.)
template <std::size_t Index, class List>
using type_at = typename detail::type_at_impl<Index, std::remove_cvref_t<List>>::type;

// Calls visit(index) for each index 0, 1, ... Count - 1, in order; index is
// an integral constant (decltype(index)::value is I).
template <std::size_t Count, class Visitor>
constexpr void for_each_index(Visitor&& visit)
{
    ([&]<std::size_t... I>(std::index_sequence<I...>) { (visit(std::integral_constant<std::size_t, I>{}), ...); })(
        std::make_index_sequence<Count>{});
}

// The same, from Count - 1 down to 0: the order of a backward pass.
template <std::size_t Count, class Visitor>
constexpr void for_each_index_down(Visitor&& visit)
{
    ([&]<std::size_t... I>(std::index_sequence<I...>) {
        (visit(std::integral_constant<std::size_t, Count - 1 - I>{}), ...);
    })(std::make_index_sequence<Count>{});
}

} // namespace petra
