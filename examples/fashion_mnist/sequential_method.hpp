// Exact or reversible backprop on the caller's thread: one trainer over the
// whole network, with the pipeline's own gradient accumulation, learning-rate
// steps and epoch statistics, so that the baselines and PETRA differ only in
// how the gradient is computed.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <utility>
#include <vector>

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
        : parameters_(Net::template make_parameters<float>(context.recipe.seed)), schedule_(context.schedule),
          batch_(context.recipe.batch), trainer_(batch_),
          optimizer_(context.recipe.optimizer(), Net::template weight_mask<float>()),
          gradient_(Net::parameter_count, 0.0f),
          accumulation_(context.recipe.accumulation)
    {
    }

    bool reads_data() const { return true; }

    void train(const micro_batch& batch, const run_position& position)
    {
        const float loss = trainer_.accumulate_gradient(parameters_, batch.images, batch.labels, gradient_);
        const std::size_t correct = petra::classification<Net>::loss::correct(batch_, trainer_.logits().data(), batch.labels.data());
        petra::record_micro_batch(statistics_, {loss, correct, batch_}, [&](double value) {
            return "the loss of micro-batch " + std::to_string(position.batch) + " of epoch " +
                   std::to_string(position.epoch + 1) + " is not finite (" + std::to_string(value) +
                   "): training diverged.";
        });
        if (accumulation_.count_gradient()) step();
    }

    petra::epoch_statistics progress() const { return statistics_; }

    // The epoch's last partial accumulation is applied, and its statistics
    // returned.
    petra::epoch_statistics end_epoch()
    {
        if (accumulation_.pending() > 0) step();
        return std::exchange(statistics_, {});
    }

    // Nothing runs between calls: the parameters are always readable, and
    // there is nothing to hold.
    struct nothing_running {};
    nothing_running pause() { return {}; }

    evaluation evaluate(const petra::labelled_images& test, std::size_t) const
    {
        return fashion::evaluate(parameters_, test);
    }
    // The whole network's parameters, to be read or written only under
    // pause().
    petra::network_parameters<Net, float>& parameters() { return parameters_; }
    std::string digest() const { return parameter_digest(parameters_); }

    template <petra::state_archive Archive>
    void transfer_state(Archive& archive)
    {
        parameters_.transfer_state(archive);
        archive.section("sequential trainer");
        optimizer_.transfer_state(archive);
        archive.values(std::span<float>(gradient_));
        accumulation_.transfer_state(archive);
        statistics_.transfer_state(archive);
    }

private:
    void step() { accumulation_.step(optimizer_, parameters_.values(), std::span<float>(gradient_), schedule_); }

    petra::network_parameters<Net, float> parameters_;
    const petra::learning_rate_schedule& schedule_;
    std::size_t batch_;
    Trainer trainer_;
    petra::sgd<float> optimizer_;
    std::vector<float> gradient_; // the sum of the gradients since the last step
    petra::gradient_accumulation accumulation_;
    petra::epoch_statistics statistics_;
};

} // namespace fashion
