// The reference network's cuts into J stages: balanced on the block costs
// measured on this machine when scripts/calibrate has written them (the
// project's own builds then define PETRA_CALIBRATED_REFERENCE_NETWORK and
// see the generated header), on the built-in cost model otherwise.
#pragma once

#include <cstddef>

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

} // namespace petra
