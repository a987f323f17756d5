// PETRA's stages on MPI ranks: include this, and link MPI (CMake:
// find_package(MPI COMPONENTS CXX), target MPI::MPI_CXX). The rest of petra,
// <petra/petra.hpp> included, never needs MPI.
#pragma once

#include <petra/mpi/channel.hpp>
#include <petra/mpi/checkpoint.hpp>
#include <petra/mpi/collectives.hpp>
#include <petra/mpi/pipeline.hpp>
#include <petra/mpi/placement.hpp>
#include <petra/mpi/rank_link.hpp>
#include <petra/mpi/session.hpp>
