// What a training method is given, and what it offers the training loop.
#pragma once

#include <concepts>
#include <cstddef>
#include <string>

#include <petra/petra.hpp>

#include "data.hpp"
#include "evaluation.hpp"
#include "metrics_files.hpp"
#include "model.hpp"
#include "options.hpp"
#include "run_state.hpp"

namespace fashion {

struct method_context {
    const training_recipe& recipe;
    const petra::learning_rate_schedule& schedule; // of optimizer steps
    std::size_t fidelity_every;                    // PETRA: measure every N micro-batches; 0: never
    fidelity_file& fidelity;                       // where the measurements go
};

// A method trains the network M::network (model.hpp), holds its parameters
// (drawn from the recipe's seed; on MPI ranks, each rank only its own
// stages') and trains one micro-batch per train() (at the position, which
// names it); reads_data() says whether this process reads the micro-batches (an MPI rank that does not feed is
// given buffers never filled); progress() is the current epoch's statistics
// so far; end_epoch() finishes the epoch (whatever is in flight, the last
// partial accumulation) and returns its statistics; pause() returns a guard
// while which the parameters may be read (no stage runs); evaluate() scores
// the network on `count` test images (read where reads_data()); digest() is
// parameter_digest() of the whole network. Its checkpoint: all it holds
// between calls, through transfer_state(archive) (parameters first) or, for
// one shard per stage, save_checkpoint and load_checkpoint
// (run_checkpoint.hpp). A method that holds the whole network in one
// process may also offer parameters(), the network_parameters, read or
// written under pause(): the weights files (--init-weights, --save-weights,
// --export-onnx) need it.
template <class M>
concept training_method = std::constructible_from<M, const method_context&> &&
                          petra::is_network<typename M::network>::value &&
                          requires(M& method, const micro_batch& batch, const run_position& position,
                                   const petra::labelled_images& test, std::size_t count) {
                              method.train(batch, position);
                              { method.reads_data() } -> std::same_as<bool>;
                              { method.progress() } -> std::same_as<petra::epoch_statistics>;
                              { method.end_epoch() } -> std::same_as<petra::epoch_statistics>;
                              method.pause();
                              { method.evaluate(test, count) } -> std::same_as<evaluation>;
                              { method.digest() } -> std::same_as<std::string>;
                          };

} // namespace fashion
