// petra: parallel end-to-end training of reversible networks. The umbrella
// header: include it to get the whole library (without exceptions, all but
// the data floor and checkpoint files, see error.hpp).
#pragma once

#include <petra/blocks.hpp>
#include <petra/error.hpp>
#if PETRA_EXCEPTIONS
#include <petra/data.hpp> // reports with exceptions only (error.hpp)
#endif
#include <petra/kernels.hpp>
#include <petra/layers.hpp>
#include <petra/models/reference_cuts.hpp>
#include <petra/models/reference_network.hpp>
#include <petra/models/reversible_reference_network.hpp>
#include <petra/network.hpp>
#include <petra/optim.hpp>
#include <petra/partition.hpp>
#include <petra/pipeline.hpp>
#include <petra/train.hpp>
#include <petra/version.hpp>
#include <petra/xtensor.hpp>
