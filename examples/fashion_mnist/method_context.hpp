// What a training method is given, and what it offers the training loop.
#pragma once

#include <concepts>
#include <cstddef>

#include <petra/petra.hpp>

#include "data.hpp"
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

// A method trains one micro-batch per train() (at the position, which
// names it); progress() is the current epoch's statistics so far;
// end_epoch() finishes the epoch (whatever is in flight, the last partial
// accumulation) and returns its statistics; pause() returns a guard while
// which the parameters may be read (no stage runs). transfer_state(archive)
// saves or restores all it holds between calls.
template <class M>
concept training_method = std::constructible_from<M, const method_context&, petra::network_parameters<net, float>&> &&
                          requires(M& method, petra::network_parameters<net, float>& parameters,
                                   const micro_batch& batch, const run_position& position) {
                              method.train(parameters, batch, position);
                              { method.progress() } -> std::same_as<petra::epoch_statistics>;
                              { method.end_epoch(parameters) } -> std::same_as<petra::epoch_statistics>;
                              method.pause();
                          };

} // namespace fashion
