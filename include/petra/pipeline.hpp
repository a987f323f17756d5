// PETRA's pipeline floor: stages, channels, the schedule, gradient
// accumulation and epoch statistics, and the two drivers (the sequential
// simulator and one thread per stage).
#pragma once

#include <petra/pipeline/accumulation.hpp>
#include <petra/pipeline/array_fifo.hpp>
#include <petra/pipeline/channel.hpp>
#include <petra/pipeline/core.hpp>
#include <petra/pipeline/links.hpp>
#include <petra/pipeline/options.hpp>
#include <petra/pipeline/paused_pipeline.hpp>
#include <petra/pipeline/pipeline.hpp>
#include <petra/pipeline/sequential_pipeline.hpp>
#include <petra/pipeline/stage.hpp>
#include <petra/pipeline/stage_threads.hpp>
#include <petra/pipeline/thread_pipeline.hpp>
#include <petra/pipeline/worker.hpp>
