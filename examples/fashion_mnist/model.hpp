// The network the job trains, and the figures every other part reads from
// its type rather than writing them out: the image shape and the classes.
#pragma once

#include <cstddef>

#include <petra/petra.hpp>

namespace fashion {

using net = petra::reference_network<>;
using image = net::input;                        // channels, height, width of one example
using task = petra::classification<net>;         // one logit per class, softmax cross-entropy
inline constexpr std::size_t classes = task::classes;

} // namespace fashion
