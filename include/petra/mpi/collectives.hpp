// The collective calls of an mpi_pipeline (for code that links MPI;
// included by mpi/pipeline.hpp, which declares them): the progress
// broadcast, the channel counts a checkpoint needs, a forward-only
// evaluation through the ranks, the parameters gathered on one rank, a
// fold over every stage in order; and this rank's memory. Each collective
// call needs every rank of the pipeline's communicator, in the same order,
// and waits first for this rank's stages to rest.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include <petra/batch_view.hpp>
#include <petra/error.hpp>
#include <petra/kernels/simd.hpp>
#include <petra/layers/softmax_cross_entropy_loss.hpp>
#include <petra/mpi/channel.hpp>
#include <petra/mpi/pipeline.hpp>
#include <petra/network.hpp>

namespace petra {

namespace detail {

// The collective calls' MPI tags, after the channels' (their link numbers,
// pipeline/links.hpp).
constexpr int evaluation_tag(std::size_t stage_count) { return int(link_count(stage_count)); }
constexpr int evaluation_labels_tag(std::size_t stage_count) { return evaluation_tag(stage_count) + 1; }
constexpr int gather_tag(std::size_t stage_count) { return evaluation_tag(stage_count) + 2; }
constexpr int fold_tag(std::size_t stage_count) { return evaluation_tag(stage_count) + 3; }

} // namespace detail

template <class Network, auto Cuts, class Optimizer, class T>
epoch_statistics mpi_pipeline<Network, Cuts, Optimizer, T>::progress()
{
    if (scores()) wait_until_idle();
    const epoch_statistics local = shared_.statistics_so_far();
    finish_progress_broadcast();
    progress_sent_ = local;
    check_mpi(MPI_Ibcast(&progress_sent_, int(sizeof(epoch_statistics)), MPI_BYTE, rank_of(stage_count - 1),
                         communicator_.get(), &progress_request_),
              "mpi pipeline: progress");
    return scores() ? local : progress_seen_;
}

template <class Network, auto Cuts, class Optimizer, class T>
std::vector<std::uint64_t> mpi_pipeline<Network, Cuts, Optimizer, T>::channel_counts()
{
    wait_until_idle();
    std::vector<std::uint64_t> mine(link_count(stage_count), 0), all(mine.size(), 0);
    placement::for_each_sending_end([&](const auto& end, std::size_t index) { mine[index] = end.messages_sent(); });
    check_mpi(MPI_Allreduce(mine.data(), all.data(), int(mine.size()), MPI_UINT64_T, MPI_MAX, communicator_.get()),
              "mpi pipeline: channel counts");
    return all;
}

template <class Network, auto Cuts, class Optimizer, class T>
inference_score mpi_pipeline<Network, Cuts, Optimizer, T>::evaluate(const T* images, const std::int32_t* labels,
                                                                    std::size_t count, std::size_t chunk)
{
    if (replicas() == 1) return evaluate_replica(images, labels, count, chunk);
    inference_score score;
    if (replica() == 0) score = evaluate_replica(images, labels, count, chunk);
    check_mpi(MPI_Bcast(&score, int(sizeof score), MPI_BYTE, 0, replica_base::job_communicator()),
              "mpi pipeline: evaluation");
    return score;
}

template <class Network, auto Cuts, class Optimizer, class T>
inference_score mpi_pipeline<Network, Cuts, Optimizer, T>::evaluate_replica(const T* images, const std::int32_t* labels,
                                                                            std::size_t count, std::size_t chunk)
{
    if (chunk == 0) {
        raise_error(error_kind::invalid_argument, "mpi pipeline: evaluation needs a chunk of at least one example.");
    }
    wait_until_idle();
    if (feeds() && count > 0 && (images == nullptr || labels == nullptr)) {
        raise_error(error_kind::invalid_argument,
                    "mpi pipeline: the rank that feeds needs the images and labels to evaluate.");
    }
    const MPI_Comm communicator = communicator_.get();
    const int last_rank = rank_of(stage_count - 1);
    constexpr int tag = detail::evaluation_tag(stage_count), labels_tag = detail::evaluation_labels_tag(stage_count);
    // The labels go to the scoring rank at once, in one message.
    std::vector<std::int32_t> scored_labels;
    MPI_Request labels_sent = MPI_REQUEST_NULL;
    if (feeds() && last_rank != rank_) {
        check_mpi(MPI_Isend(labels, int(count), MPI_INT32_T, last_rank, labels_tag, communicator, &labels_sent),
                  "mpi pipeline: evaluation labels");
    }
    if (scores()) {
        if (feeds()) {
            scored_labels.assign(labels, labels + count);
        } else {
            scored_labels.resize(count);
            check_mpi(
                MPI_Recv(scored_labels.data(), int(count), MPI_INT32_T, 0, labels_tag, communicator, MPI_STATUS_IGNORE),
                "mpi pipeline: evaluation labels");
        }
    }
    // Two buffers, each as large as any activation this rank's stages take
    // or give for a chunk.
    std::size_t largest = 0;
    for (std::size_t j = first_stage(); j < end_stage(); ++j) {
        largest = std::max(
            {largest, Network::profile[Cuts[j]].input_values, Network::profile[Cuts[j + 1] - 1].output_values});
    }
    kernels::aligned_vector<T> in(chunk * largest), out(chunk * largest);
    inference_score score;
    score.examples = count;
    using loss =
        typename softmax_cross_entropy_loss<Network::output::size>::template bind<shape<Network::output::size>>;
    for (std::size_t first = 0; first < count; first += chunk) {
        const std::size_t size = std::min(chunk, count - first);
        const T* input = nullptr;
        if (feeds()) {
            input = images + first * Network::input::size;
        } else {
            check_mpi(MPI_Recv(in.data(), int(layout::forward_message_values(first_stage(), size)), mpi_type<T>(),
                               rank_ - 1, tag, communicator, MPI_STATUS_IGNORE),
                      "mpi pipeline: evaluation");
            input = in.data();
        }
        for_each_hosted([&](auto& hosted, std::size_t) {
            using stage_t = std::remove_cvref_t<decltype(hosted.worker.stage())>;
            hosted.worker.stage().infer(batch_view<const T, typename stage_t::input>(input, size),
                                        batch_view<T, typename stage_t::output>(out.data(), size));
            std::swap(in, out);
            input = in.data();
        });
        if (scores()) {
            const std::int32_t* chunk_labels = scored_labels.data() + first;
            score.loss_sum += double(loss::evaluate(size, input, chunk_labels, nullptr)) * double(size);
            score.correct += loss::correct(size, input, chunk_labels);
        } else {
            check_mpi(MPI_Send(input, int(layout::forward_message_values(end_stage(), size)), mpi_type<T>(), rank_ + 1,
                               tag, communicator),
                      "mpi pipeline: evaluation");
        }
    }
    check_mpi(MPI_Wait(&labels_sent, MPI_STATUS_IGNORE), "mpi pipeline: evaluation labels");
    broadcast_from(last_rank, score);
    return score;
}

template <class Network, auto Cuts, class Optimizer, class T>
void mpi_pipeline<Network, Cuts, Optimizer, T>::gather_parameters(network_parameters<Network, T>* whole, int root)
{
    if (rank_ == root && whole == nullptr) {
        raise_error(error_kind::invalid_argument,
                    "mpi pipeline: gather_parameters needs the parameters to fill on its root.");
    }
    wait_until_idle();
    const MPI_Datatype type = mpi_type<T>();
    const MPI_Comm communicator = communicator_.get();
    constexpr int tag = detail::gather_tag(stage_count);
    for_each_hosted([&](auto& hosted, std::size_t) {
        if (rank_ == root) {
            hosted.parameters.copy_into(*whole);
            return;
        }
        const auto values = hosted.parameters.values();
        const auto state = hosted.parameters.state();
        check_mpi(MPI_Send(values.data(), int(values.size()), type, root, tag, communicator), "gather");
        check_mpi(MPI_Send(state.data(), int(state.size()), type, root, tag, communicator), "gather");
    });
    if (rank_ != root) return;
    for (std::size_t j = 0; j < stage_count; ++j) {
        if (hosts(j)) continue;
        const std::size_t values = Network::parameter_offsets[Cuts[j]],
                          values_end = Network::parameter_offsets[Cuts[j + 1]];
        const std::size_t state = Network::state_offsets[Cuts[j]], state_end = Network::state_offsets[Cuts[j + 1]];
        check_mpi(MPI_Recv(whole->values().data() + values, int(values_end - values), type, rank_of(j), tag,
                           communicator, MPI_STATUS_IGNORE),
                  "gather");
        check_mpi(MPI_Recv(whole->state().data() + state, int(state_end - state), type, rank_of(j), tag, communicator,
                           MPI_STATUS_IGNORE),
                  "gather");
    }
}

template <class Network, auto Cuts, class Optimizer, class T>
template <class Fold>
std::uint64_t mpi_pipeline<Network, Cuts, Optimizer, T>::fold_stages(std::uint64_t state, Fold&& fold)
{
    wait_until_idle();
    const MPI_Comm communicator = communicator_.get();
    constexpr int tag = detail::fold_tag(stage_count);
    if (rank_ > 0) {
        check_mpi(MPI_Recv(&state, 1, MPI_UINT64_T, rank_ - 1, tag, communicator, MPI_STATUS_IGNORE), "fold");
    }
    for_each_hosted([&](auto& hosted, std::size_t j) {
        state = fold(state, j, std::span<const T>(hosted.parameters.values()),
                     std::span<const T>(hosted.parameters.state()));
    });
    if (rank_ + 1 < ranks_) check_mpi(MPI_Send(&state, 1, MPI_UINT64_T, rank_ + 1, tag, communicator), "fold");
    broadcast_from(ranks_ - 1, state);
    return state;
}

template <class Network, auto Cuts, class Optimizer, class T>
std::size_t mpi_pipeline<Network, Cuts, Optimizer, T>::memory_bytes() const
{
    std::size_t bytes = 0;
    for_each_hosted([&](const auto& hosted, std::size_t) {
        bytes +=
            hosted.parameters.memory_bytes() + hosted.weight_mask.size() * sizeof(T) + hosted.worker.memory_bytes();
    });
    return bytes + placement::channel_bytes() + replica_base::exchange_bytes();
}

} // namespace petra
