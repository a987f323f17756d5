// PETRA on MPI ranks (built when the job links MPI): the network cut into
// Stages stages, spread over the ranks of MPI_COMM_WORLD by
// petra::mpi_pipeline, in --replicas copies. Every rank runs the same
// loop; each replica's first rank reads and feeds the data (its shard of
// each micro-batch), the last stage's rank scores, and each rank holds only
// its own stages' parameters: the test set runs through each replica's
// ranks forward-only, and the digest is chained from rank to rank (the
// replicas hold the same network between epochs).
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include <petra/mpi.hpp>
#include <petra/petra.hpp>

#include "data.hpp"
#include "digest.hpp"
#include "evaluation.hpp"
#include "method_context.hpp"
#include "model.hpp"
#include "run_state.hpp"

namespace fashion {

template <class Net, std::size_t Stages>
class mpi_method {
public:
    using network = Net;
    static constexpr auto cuts = cuts_of<Net, Stages>;
    using pipeline_type = petra::mpi_pipeline<Net, cuts, petra::sgd<float>, float>;

    // Refuses (std::invalid_argument, on every rank) more ranks than stages.
    explicit mpi_method(const method_context& context)
        : pipeline_(MPI_COMM_WORLD, context.recipe.seed, context.recipe.optimizer(), context.schedule,
                    context.recipe.pipeline())
    {}

    bool reads_data() const { return pipeline_.feeds(); }
    // Replicas are saved between epochs only (petra/train/training_loop.hpp).
    bool checkpoints_within_epoch() const { return pipeline_.replicas() == 1; }
    // Every replica's ranks.
    int ranks() const { return pipeline_.ranks() * int(pipeline_.replicas()); }
    pipeline_type& pipeline() { return pipeline_; }

    void train(const micro_batch& batch, const run_position&)
    {
        if (pipeline_.feeds()) pipeline_.feed(batch.images, batch.labels);
        else pipeline_.feed();
    }

    // Collective: every rank calls it after every micro-batch; rank 0
    // learns the scoring rank's statistics one micro-batch late.
    petra::epoch_statistics progress() { return pipeline_.progress(); }
    petra::epoch_statistics end_epoch() { return pipeline_.drain(); }
    // This rank's stages at rest between the same two ticks while the guard
    // lives (not collective).
    auto pause() { return pipeline_.pause(); }

    evaluation evaluate(const petra::labelled_images& test, std::size_t count)
    {
        const petra::inference_score score =
            pipeline_.evaluate(test.images.data(), test.labels.data(), count, evaluation_chunk);
        return {score.mean_loss(), score.accuracy()};
    }

    std::string digest()
    {
        const auto values = [](std::uint64_t hash, std::size_t, std::span<const float> stage_values,
                               std::span<const float>) { return digest_of(hash, stage_values); };
        const auto state = [](std::uint64_t hash, std::size_t, std::span<const float>,
                              std::span<const float> stage_state) { return digest_of(hash, stage_state); };
        return digest_text(pipeline_.fold_stages(pipeline_.fold_stages(digest_basis, values), state));
    }

    // Checkpoints: each rank the shards of its stages, then rank 0 the
    // manifest with the run's records (read back on every rank).
    template <class Records>
    std::uint64_t save_checkpoint(const std::string& path, Records&& records)
    {
        return petra::save_mpi_checkpoint(path, Net::signature, pipeline_, records);
    }
    template <class Records>
    void load_checkpoint(const std::string& path, Records&& records)
    {
        petra::load_mpi_checkpoint(path, Net::signature, pipeline_, records);
    }

private:
    pipeline_type pipeline_;
};

} // namespace fashion
