// PETRA's pipelines (floor 7): the stages of a network cut at Cuts, one
// worker each, connected by channels, driven either tick by tick on the
// caller's thread (sequential_pipeline, the simulator) or by one std::thread
// per stage (thread_pipeline). Both compute the same numbers, bit for bit,
// and offer the same calls, so that code written for one runs on the other.
//
//   constexpr auto cuts = partition<net, 4>();
//   auto parameters = net::make_parameters<float>(1);
//   thread_pipeline<net, cuts, sgd<float>> pipeline(parameters, sgd_options{}, schedule,
//                                                   {.batch = 64, .accumulation = 1});
//   for (each micro-batch) pipeline.feed(images, labels);
//   {
//       const auto paused = pipeline.pause();      // read paused.parameters(), paused.state()
//   }
//   epoch_statistics epoch = pipeline.drain();
//
// What both drivers share and the rules for reading the parameters:
// core.hpp; the guard: paused_pipeline.hpp. transfer_state(archive) saves
// or restores everything in flight between two ticks (train/checkpoint.hpp
// writes it to a file): a run stopped mid-epoch resumes, in either driver,
// exactly where it stood.
#pragma once

#include <petra/pipeline/sequential_pipeline.hpp>
#include <petra/pipeline/thread_pipeline.hpp>
