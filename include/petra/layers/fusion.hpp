// Fusion of neighbouring layers in a chain (floor 3): where a layer A is
// followed by a layer B and fused_layers<A, B> names a layer, a chain runs
// that one layer in their place. The fused layer takes the pair's input and
// gives its output, holds the pair's parameters and state in the same order
// (so a network's parameter layout, and its checkpoints, do not change), and
// computes the pair's numbers; it only moves less memory. The user writes
// the pair; the chain finds it at compile time, in any chain:
//
//   chain<conv2d<16, 16>, batch_norm<16>, relu>   runs conv2d, then batch_norm_relu<16>
//
// A header that defines a fused layer specialises fused_layers for its pair
// (batch_norm.hpp does). Pairs are fused from the end of the chain to its
// start, each layer in at most one pair.
#pragma once

#include <type_traits>

#include <boost/hana/fold_right.hpp>

#include <petra/type_list.hpp>

namespace petra {

// The layer that runs First then Second in one, or void (the default): no
// fusion.
template <class First, class Second>
struct fused_layers {
    using type = void;
};

namespace detail {

template <class... Layers>
struct fused_sequence {};

// A layer put in front of the layers already fused behind it: merged with
// the first of them where the pair fuses.
template <class Layer, class... Rest>
fused_sequence<Layer, Rest...> put_in_front(boost::hana::basic_type<Layer>, fused_sequence<Rest...>);

template <class Layer, class Next, class... Rest>
    requires(!std::is_void_v<typename fused_layers<Layer, Next>::type>)
fused_sequence<typename fused_layers<Layer, Next>::type, Rest...> put_in_front(boost::hana::basic_type<Layer>,
                                                                               fused_sequence<Next, Rest...>);

inline constexpr auto put_in_front_of = [](auto layer, auto rest) { return decltype(put_in_front(layer, rest)){}; };

} // namespace detail

// Layers... with every fusable pair replaced by its fused layer, as
// fused_sequence<...>.
template <class... Layers>
using fused_sequence_of =
    decltype(boost::hana::fold_right(type_list<Layers...>, detail::fused_sequence<>{}, detail::put_in_front_of));

} // namespace petra
