// petra's core (CMake target petra::core): kernels, layers, blocks,
// networks, the partitioner, the pipeline, the optimizer, the trainers,
// checkpoints (these with exceptions only, error.hpp) and weights in and
// out (interchange.hpp: named arrays, .npz files, ONNX export). Needs
// Boost.Hana and xsimd only; no tensor library, no zlib. petra/petra.hpp
// adds the data floor and xtensor results.
#pragma once

#include <petra/blocks.hpp>
#include <petra/error.hpp>
#include <petra/interchange.hpp>
#include <petra/kernels.hpp>
#include <petra/layers.hpp>
#include <petra/models/reference_cuts.hpp>
#include <petra/models/reference_network.hpp>
#include <petra/models/reversible_reference_network.hpp>
#include <petra/network.hpp>
#include <petra/optim.hpp>
#include <petra/partition.hpp>
#include <petra/pipeline.hpp>
#include <petra/random.hpp>
#include <petra/train.hpp>
#include <petra/version.hpp>
