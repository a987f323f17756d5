// PETRA's pipeline floor: stages, channels, the schedule, gradient
// accumulation and epoch statistics, and the two drivers (the sequential
// simulator and one thread per stage).
#pragma once

#include <petra/pipeline/accumulation.hpp>
#include <petra/pipeline/channel.hpp>
#include <petra/pipeline/pipeline.hpp>
#include <petra/pipeline/stage.hpp>
#include <petra/pipeline/worker.hpp>
