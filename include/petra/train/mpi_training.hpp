// PETRA on MPI ranks as a training method (training_method.hpp), for code
// that links MPI: the network cut into the stages of Cuts, spread over the
// ranks of a communicator by mpi_pipeline, in options.replicas copies.
// Every rank runs the same loop; each replica's rank 0 reads and feeds the
// data (reads_data(): the global micro-batches of replicas x batch
// examples, of which it feeds its shard), and each rank holds only its own
// stages' parameters, drawn from the seed as
// Net::make_parameters<float>(seed) draws them. With replicas, checkpoints
// are saved between epochs only (checkpoints_within_epoch(): the loop
// saves one falling due within an epoch at its end).
//
//   petra::petra_on_ranks<net, cuts> method(MPI_COMM_WORLD, /*seed=*/1, sgd_options{...}, plan.schedule(),
//                                           {.batch = 32});
//
// On ranks, every call the loop makes is collective, and so must the
// caller's stop request be: the ranks must agree on it before the same
// micro-batch (the Fashion-MNIST job's front end reduces it over the ranks).
// A checkpoint saved here loads on threads or on the simulator, and back.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include <petra/mpi/checkpoint.hpp>
#include <petra/mpi/pipeline.hpp>
#include <petra/optim/schedule.hpp>
#include <petra/optim/sgd.hpp>
#include <petra/pipeline/options.hpp>
#include <petra/train/training_method.hpp>

namespace petra {

template <class Net, auto Cuts>
class petra_on_ranks {
public:
    using network = Net;
    using pipeline_type = mpi_pipeline<Net, Cuts, sgd<float>, float>;

    // Collective; refuses (std::invalid_argument, on every rank) more ranks
    // than stages per replica, or a rank count the replicas do not divide.
    petra_on_ranks(MPI_Comm communicator, std::uint64_t seed, const sgd_options& optimizer,
                   const learning_rate_schedule& schedule, const pipeline_options& options)
        : communicator_(communicator), pipeline_(communicator, seed, optimizer, schedule, options)
    {}

    bool reads_data() const { return pipeline_.feeds(); }
    bool checkpoints_within_epoch() const { return pipeline_.replicas() == 1; }
    void train(const training_batch<typename Net::input>& batch, const training_position&)
    {
        if (pipeline_.feeds()) pipeline_.feed(batch.images, batch.labels);
        else pipeline_.feed();
    }
    // Collective, after every micro-batch: rank 0 learns the scoring rank's
    // statistics one micro-batch late.
    epoch_statistics progress() { return pipeline_.progress(); }
    epoch_statistics end_epoch() { return pipeline_.drain(); }
    // This rank's stages at rest while the guard lives (not collective):
    // the loop holds it while each rank writes its shards.
    auto pause() { return pipeline_.pause(); }

    // Whether any rank finds `due`: the loop's clock-driven checkpoints are
    // saved by every rank or none.
    bool agree(bool due)
    {
        int local = due ? 1 : 0, any = 0;
        MPI_Allreduce(&local, &any, 1, MPI_INT, MPI_MAX, communicator_);
        return any != 0;
    }

    pipeline_type& pipeline() { return pipeline_; }

    // Each rank the shards of its stages, then rank 0 the manifest with the
    // loop's records (read back on every rank).
    template <class Records>
    std::uint64_t save_checkpoint(const std::string& path, Records&& records)
    {
        return save_mpi_checkpoint(path, Net::signature, pipeline_, records);
    }
    template <class Records>
    void load_checkpoint(const std::string& path, Records&& records)
    {
        load_mpi_checkpoint(path, Net::signature, pipeline_, records);
    }

private:
    MPI_Comm communicator_;
    pipeline_type pipeline_;
};

} // namespace petra
