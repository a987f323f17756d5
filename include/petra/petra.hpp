// petra: parallel end-to-end training of reversible networks. The umbrella
// header: include it to get the whole library.
#pragma once

#include <petra/blocks.hpp>
#include <petra/data.hpp>
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
