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

// A method of the job is one of petra's training methods
// (petra/train/training_method.hpp: train(), reads_data(), progress(),
// end_epoch(), pause(), and a checkpoint in either of the training loop's
// two forms) of the network M::network (model.hpp), built from the context
// (its parameters drawn from the recipe's seed; on MPI ranks, each rank
// holds only its own stages'). It also scores the network on `count` test
// images (read where reads_data()), and gives digest(), parameter_digest()
// of the whole network. A method that holds the whole network in one
// process may also offer parameters(), the network_parameters, read or
// written under pause(): the weights files (--init-weights, --save-weights,
// --export-onnx) need it.
template <class M>
concept training_method = petra::training_method<M> && std::constructible_from<M, const method_context&> &&
    requires(M& method, const petra::labelled_images& test, std::size_t count)
{
    requires std::same_as<decltype(method.evaluate(test, count)), evaluation>;
    requires std::same_as<decltype(method.digest()), std::string>;
};

} // namespace fashion
