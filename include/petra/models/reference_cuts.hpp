// The reference network's cuts into J stages: balanced on the block costs
// measured on this machine when scripts/calibrate has written them (the
// project's own builds then define PETRA_CALIBRATED_REFERENCE_NETWORK and
// see the generated header), on the built-in cost model otherwise; and the
// cuts any network is cut by unless told otherwise (default_cuts).
#pragma once

#include <cstddef>
#include <type_traits>

#include <petra/models/reference_network.hpp>
#include <petra/partition.hpp>

#if defined(PETRA_CALIBRATED_REFERENCE_NETWORK)
#include <petra/calibration/reference_network.hpp>
#endif

namespace petra {

// Whether reference_cuts uses measured costs.
#if defined(PETRA_CALIBRATED_REFERENCE_NETWORK)
inline constexpr bool reference_cuts_measured = true;
#else
inline constexpr bool reference_cuts_measured = false;
#endif

template <std::size_t Stages>
constexpr stage_cuts<Stages> reference_cuts()
{
#if defined(PETRA_CALIBRATED_REFERENCE_NETWORK)
    return partition<reference_network<>, Stages>(calibration::reference_network);
#else
    return partition<reference_network<>, Stages>();
#endif
}

// The best-known cuts of Net into Stages stages: reference_cuts for the
// reference network, the built-in cost model's for any other.
template <class Net, std::size_t Stages>
constexpr stage_cuts<Stages> default_cuts()
{
    if constexpr (std::is_same_v<Net, reference_network<>>) return reference_cuts<Stages>();
    else return partition<Net, Stages>();
}

} // namespace petra
