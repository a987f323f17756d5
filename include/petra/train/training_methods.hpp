// The training methods of one process (floor 8), each a training_method
// (training_method.hpp) over the caller's parameters, built alike:
//
//   auto weights = net::make_parameters<float>(/*seed=*/1);
//   petra::petra_on_threads<net, cuts> method(weights, sgd_options{...}, plan.schedule(), {.batch = 32});
//
// - backprop_method<Net, Trainer>: exact_backprop or reversible_backprop on
//   the caller's thread, with the pipeline's gradient accumulation,
//   learning-rate steps and epoch statistics, so that it and PETRA differ
//   only in how the gradient is computed;
// - pipeline_method<Net, Cuts, Pipeline>: PETRA, one thread per stage
//   (petra_on_threads) or the sequential simulator (petra_on_simulator),
//   which compute the same numbers; a checkpoint of one resumes on the
//   other, and on MPI ranks (train/mpi_training.hpp).
#pragma once

#if !(defined(__cpp_exceptions) || defined(__EXCEPTIONS))
#error "petra: train/training_methods.hpp needs exceptions: checkpoint files report with them only (see error.hpp)."
#endif

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <petra/network.hpp>
#include <petra/optim/schedule.hpp>
#include <petra/optim/sgd.hpp>
#include <petra/pipeline/accumulation.hpp>
#include <petra/pipeline/options.hpp>
#include <petra/pipeline/sequential_pipeline.hpp>
#include <petra/pipeline/thread_pipeline.hpp>
#include <petra/train/checkpoint.hpp>
#include <petra/train/exact_backprop.hpp>
#include <petra/train/reversible_backprop.hpp>
#include <petra/train/sharded_checkpoint.hpp>
#include <petra/train/trainer_support.hpp>
#include <petra/train/training_method.hpp>

namespace petra {

// Trainer: exact_backprop<Net, float> or reversible_backprop<Net, float>.
// options: its batch, accumulation and precision (the buffers and the delay
// exponent are PETRA's); a precision this CPU cannot compute in is refused
// (std::invalid_argument).
template <class Net, class Trainer>
class backprop_method {
public:
    using network = Net;

    backprop_method(network_parameters<Net, float>& parameters, const sgd_options& optimizer,
                    const learning_rate_schedule& schedule, const pipeline_options& options)
        : parameters_(parameters), schedule_(schedule), batch_(options.batch), trainer_(options.batch),
          optimizer_(optimizer, Net::template weight_mask<float>()), gradient_(Net::parameter_count, 0.0f),
          accumulation_(options.accumulation), precision_(options.precision)
    {
        require_precision(precision_);
    }

    bool reads_data() const { return true; }

    void train(const training_batch<typename Net::input>& batch, const training_position& position)
    {
        const precision_scope arithmetic(precision_);
        const float loss = trainer_.accumulate_gradient(parameters_, batch.images, batch.labels, gradient_);
        const std::size_t correct =
            classification<Net>::loss::correct(batch_, trainer_.logits().data(), batch.labels.data());
        record_micro_batch(statistics_, {loss, correct, batch_}, [&](double value) {
            return "the loss of micro-batch " + std::to_string(position.batch) + " of epoch " +
                   std::to_string(position.epoch + 1) + " is not finite (" + std::to_string(value) +
                   "): training diverged.";
        });
        if (accumulation_.count_gradient()) step();
    }

    epoch_statistics progress() const { return statistics_; }

    // The epoch's last partial accumulation is applied.
    epoch_statistics end_epoch()
    {
        if (accumulation_.pending() > 0) step();
        return std::exchange(statistics_, {});
    }

    // Nothing runs between calls: the parameters are always readable.
    struct nothing_running {};
    nothing_running pause() { return {}; }

    network_parameters<Net, float>& parameters() { return parameters_; }

    // The parameters first, then the trainer's own state.
    template <state_archive Archive>
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

    network_parameters<Net, float>& parameters_;
    learning_rate_schedule schedule_;
    std::size_t batch_;
    Trainer trainer_;
    sgd<float> optimizer_;
    std::vector<float> gradient_; // the sum of the gradients since the last step
    gradient_accumulation accumulation_;
    epoch_statistics statistics_;
    precision precision_;
};

template <class Net>
using exact_backprop_method = backprop_method<Net, exact_backprop<Net, float>>;
template <class Net>
using reversible_backprop_method = backprop_method<Net, reversible_backprop<Net, float>>;

// Pipeline: thread_pipeline or sequential_pipeline.
template <class Net, auto Cuts, template <class, auto, class, class> class Pipeline>
class pipeline_method {
public:
    using network = Net;
    using pipeline_type = Pipeline<Net, Cuts, sgd<float>, float>;

    pipeline_method(network_parameters<Net, float>& parameters, const sgd_options& optimizer,
                    const learning_rate_schedule& schedule, const pipeline_options& options)
        : parameters_(parameters), pipeline_(parameters, optimizer, schedule, options)
    {}

    bool reads_data() const { return true; }
    void train(const training_batch<typename Net::input>& batch, const training_position&)
    {
        pipeline_.feed(batch.images, batch.labels);
    }
    epoch_statistics progress() { return pipeline_.progress(); }
    epoch_statistics end_epoch() { return pipeline_.drain(); }
    // Every stage done with the micro-batches fed: the parameters are
    // readable while the guard lives.
    auto pause() { return pipeline_.pause(); }

    network_parameters<Net, float>& parameters() { return parameters_; }
    pipeline_type& pipeline() { return pipeline_; }

    // One shard per stage, then the manifest with the loop's records
    // (train/sharded_checkpoint.hpp).
    template <class Records>
    std::uint64_t save_checkpoint(const std::string& path, Records&& records)
    {
        return save_sharded_checkpoint(path, Net::signature, pipeline_, records);
    }
    template <class Records>
    void load_checkpoint(const std::string& path, Records&& records)
    {
        load_sharded_checkpoint(path, Net::signature, pipeline_, records);
    }

private:
    network_parameters<Net, float>& parameters_;
    pipeline_type pipeline_;
};

template <class Net, auto Cuts>
using petra_on_threads = pipeline_method<Net, Cuts, thread_pipeline>;
template <class Net, auto Cuts>
using petra_on_simulator = pipeline_method<Net, Cuts, sequential_pipeline>;

} // namespace petra
