// PETRA in one process: the network cut into Stages stages, trained by the
// thread pipeline (one thread per stage) or by the sequential simulator
// (Pipeline); optionally with the gradient-fidelity probe (fidelity.hpp)
// measuring every fidelity_every micro-batches.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include <petra/petra.hpp>

#include "data.hpp"
#include "digest.hpp"
#include "evaluation.hpp"
#include "fidelity.hpp"
#include "method_context.hpp"
#include "metrics_files.hpp"
#include "model.hpp"
#include "run_state.hpp"

namespace fashion {

template <class Net, std::size_t Stages, template <class, auto, class, class> class Pipeline = petra::thread_pipeline>
class petra_method {
public:
    using network = Net;
    static constexpr auto cuts = cuts_of<Net, Stages>;

    explicit petra_method(const method_context& context)
        : parameters_(Net::template make_parameters<float>(context.recipe.seed)),
          pipeline_(parameters_, context.recipe.optimizer(), context.schedule, context.recipe.pipeline()),
          fidelity_every_(context.fidelity_every), fidelity_(context.fidelity)
    {
        if (fidelity_every_ != 0) {
            probe_ = std::make_unique<fidelity_probe<Net, cuts>>(context.recipe.batch);
            pipeline_.set_trace(
                [probe = probe_.get()](const petra::pipeline_event<float>& event) { probe->observe(event); });
        }
    }

    bool reads_data() const { return true; }

    void train(const micro_batch& batch, const run_position& position)
    {
        if (!probe_) {
            pipeline_.feed(batch.images, batch.labels);
            return;
        }
        probe_->remember(position.batch, batch.images.data(), batch.labels.data());
        const bool measure = (position.steps + 1) % fidelity_every_ == 0 && probe_->measurable();
        if (measure) probe_->before_tick(pipeline_.pause(), position.batch);
        pipeline_.feed(batch.images, batch.labels);
        if (measure) {
            const auto paused = pipeline_.pause();
            fidelity_.write(position.epoch + 1, position.steps + 1, probe_->after_tick());
        }
    }

    petra::epoch_statistics progress() { return pipeline_.progress(); }
    petra::epoch_statistics end_epoch() { return pipeline_.drain(); }
    // Every stage done with the micro-batches fed: the parameters are
    // readable while the guard lives.
    auto pause() { return pipeline_.pause(); }

    // After end_epoch(): no stage runs.
    evaluation evaluate(const petra::labelled_images& test, std::size_t) const
    {
        return fashion::evaluate(parameters_, test);
    }
    // The whole network's parameters, to be read or written only under
    // pause().
    petra::network_parameters<Net, float>& parameters() { return parameters_; }
    std::string digest()
    {
        const auto paused = pipeline_.pause();
        return parameter_digest(parameters_);
    }

    // Checkpoints: one shard per stage (its state and its slice of the
    // parameters), then the manifest with the run's records.
    template <class Records>
    std::uint64_t save_checkpoint(const std::string& path, Records&& records)
    {
        return petra::save_sharded_checkpoint(path, Net::signature, pipeline_, records);
    }
    template <class Records>
    void load_checkpoint(const std::string& path, Records&& records)
    {
        petra::load_sharded_checkpoint(path, Net::signature, pipeline_, records);
    }

private:
    petra::network_parameters<Net, float> parameters_;
    Pipeline<Net, cuts, petra::sgd<float>, float> pipeline_;
    std::size_t fidelity_every_;
    fidelity_file& fidelity_;
    std::unique_ptr<fidelity_probe<Net, cuts>> probe_;
};

} // namespace fashion
