// Exact or reversible backprop on the caller's thread: petra's
// backprop_method (the pipeline's own gradient accumulation, learning-rate
// steps and epoch statistics, so that the baselines and PETRA differ only in
// how the gradient is computed) over parameters of its own, drawn from the
// recipe's seed, with the job's scoring and digest.
#pragma once

#include <cstddef>
#include <string>

#include <petra/petra.hpp>

#include "data.hpp"
#include "digest.hpp"
#include "evaluation.hpp"
#include "method_context.hpp"
#include "run_state.hpp"

namespace fashion {

// Trainer: exact_backprop<Net, float> or reversible_backprop<Net, float>.
template <class Net, class Trainer>
class sequential_method {
public:
    using network = Net;

    explicit sequential_method(const method_context& context)
        : parameters_(Net::template make_parameters<float>(context.recipe.seed)),
          method_(parameters_, context.recipe.optimizer(), context.schedule, context.recipe.pipeline())
    {}
    sequential_method(const sequential_method&) = delete; // the method holds a reference to the parameters
    sequential_method& operator=(const sequential_method&) = delete;

    bool reads_data() const { return true; }
    void train(const micro_batch& batch, const run_position& position) { method_.train(batch, position); }
    petra::epoch_statistics progress() const { return method_.progress(); }
    petra::epoch_statistics end_epoch() { return method_.end_epoch(); }
    auto pause() { return method_.pause(); }

    evaluation evaluate(const petra::labelled_images& test, std::size_t) const
    {
        return fashion::evaluate(parameters_, test);
    }
    // The whole network's parameters, to be read or written only under
    // pause().
    petra::network_parameters<Net, float>& parameters() { return parameters_; }
    std::string digest() const { return parameter_digest(parameters_); }

    // The parameters first, then the trainer's state.
    template <petra::state_archive Archive>
    void transfer_state(Archive& archive)
    {
        method_.transfer_state(archive);
    }

private:
    petra::network_parameters<Net, float> parameters_;
    petra::backprop_method<Net, Trainer> method_;
};

} // namespace fashion
