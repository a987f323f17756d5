// What the training loop drives (floor 8): a training method, one way of
// training a network on micro-batches (exact or reversible backprop on the
// caller's thread, PETRA on threads, on the sequential simulator or on MPI
// ranks: train/training_methods.hpp, train/mpi_training.hpp), and the
// figures the loop and the method share.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include <petra/batch_view.hpp>
#include <petra/network.hpp>
#include <petra/pipeline/accumulation.hpp>

namespace petra {

// Where a run stands: the next micro-batch of the current epoch, the
// micro-batches trained in the whole run, the training time so far
// (evaluation and the loop's waiting aside).
struct training_position {
    std::size_t epoch = 0; // the current epoch, from 0
    std::size_t batch = 0; // the next micro-batch of this epoch
    std::size_t steps = 0; // micro-batches trained in the whole run
    double training_seconds = 0;
};

// One micro-batch, as the method reads it: valid during the call.
template <class Input>
struct training_batch {
    const_batch<float, Input> images;
    std::span<const std::int32_t> labels;
};

// A method of network M::network:
// - train(batch, position) trains micro-batch position.batch of epoch
//   position.epoch (the position names it in messages);
// - reads_data() says whether this process reads the micro-batches (an MPI
//   rank that does not feed is given buffers never filled);
// - progress() is the current epoch's statistics so far (on MPI ranks a
//   collective call, made on every rank after every micro-batch);
// - end_epoch() finishes the epoch (what is in flight, the last partial
//   accumulation) and returns its statistics;
// - pause() returns a guard while which the parameters may be read;
// - its checkpoint is either one file (transfer_state(archive), the
//   parameters first: the loop writes the file) or files of its own
//   (save_checkpoint(path, records) returning the bytes written, and
//   load_checkpoint(path, records), records(archive) being the loop's;
//   train/training_loop.hpp).
template <class M>
concept training_method = is_network<typename M::network>::value &&
    requires(M& method, const training_batch<typename M::network::input>& batch, const training_position& position)
{
    method.train(batch, position);
    requires std::same_as<decltype(method.reads_data()), bool>;
    requires std::same_as<decltype(method.progress()), epoch_statistics>;
    requires std::same_as<decltype(method.end_epoch()), epoch_statistics>;
    method.pause();
};

} // namespace petra
