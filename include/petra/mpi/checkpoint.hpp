// Checkpoints of a pipeline on MPI ranks (for code that links MPI), in the
// sharded format of train/sharded_checkpoint.hpp: each rank writes the
// shards of its own stages, each atomically; rank 0 writes the manifest
// LAST, only once every rank has reported its shards committed. A save
// interrupted anywhere (a rank killed, a full disk) leaves the previous
// manifest, and the shards it names, loadable.
//
//   save_mpi_checkpoint(path, net::signature, pipeline, [&](auto& archive) { ... rank 0's records ... });
//   load_mpi_checkpoint(path, net::signature, pipeline, [&](auto& archive) { ... read on every rank ... });
//
// Both are collective, and fail alike on every rank (checkpoint_error: the
// rank whose file failed names it, the others say another rank failed), so
// that no rank goes on alone. The path must name the same file for every
// rank (one file system), as must the shards for the ranks that host them.
// A checkpoint saved with R ranks loads into a pipeline of the same
// network, cuts and options on any number of ranks, on threads or on the
// simulator (load_sharded_checkpoint), and back.
//
// With replicas, a checkpoint is saved between epochs, where every
// replica holds the same state (the gradients summed and applied, the
// running statistics averaged): replica 0 writes the shards and the
// manifest, every replica reads them, and the shards' headers refuse a
// pipeline of another replica count (pipeline/core.hpp). Failures are
// then shared by every rank of every replica.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include <petra/mpi/channel.hpp>
#include <petra/mpi/pipeline.hpp>
#include <petra/train/checkpoint.hpp>
#include <petra/train/sharded_checkpoint.hpp>

namespace petra {

namespace detail {

// Whether any rank failed; the failing ranks rethrow their own error, the
// others throw one that says another rank failed.
inline void fail_together(MPI_Comm communicator, const std::exception_ptr& failure, const std::string& what)
{
    int failed = failure ? 1 : 0, any = 0;
    check_mpi(MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, communicator), what);
    if (failure) std::rethrow_exception(failure);
    if (any != 0) throw checkpoint_error(what + ": another rank failed (its own message names the file).");
}

} // namespace detail

// Collective over replica 0's ranks (called by save_mpi_checkpoint).
template <class Network, auto Cuts, class Optimizer, class T, class Records>
std::uint64_t save_replica_checkpoint(const std::string& path, std::uint64_t signature,
                                      mpi_pipeline<Network, Cuts, Optimizer, T>& pipeline, Records&& records)
{
    constexpr std::size_t stage_count = Cuts.size() - 1;
    const MPI_Comm communicator = pipeline.communicator();
    checkpoint_manifest manifest;
    if (pipeline.rank() == 0) manifest.token = new_checkpoint_token();
    check_mpi(MPI_Bcast(&manifest.token, 1, MPI_UINT64_T, 0, communicator), "checkpoint token");
    const std::vector<std::uint64_t> counts = pipeline.channel_counts();

    // Each rank its shards; then every rank knows every shard's size.
    std::vector<std::uint64_t> bytes(stage_count, 0), all_bytes(stage_count, 0);
    std::exception_ptr failure;
    try {
        for (std::size_t j = pipeline.first_stage(); j < pipeline.end_stage(); ++j) {
            bytes[j] = write_checkpoint_shard(path, signature, manifest.token, j, [&](checkpoint_writer& out) {
                pipeline.transfer_stage_state(j, out, counts);
            });
        }
    } catch (...) {
        failure = std::current_exception();
    }
    detail::fail_together(communicator, failure, "checkpoint '" + path + "'");
    check_mpi(MPI_Allreduce(bytes.data(), all_bytes.data(), int(stage_count), MPI_UINT64_T, MPI_SUM, communicator),
              "checkpoint shard sizes");

    // The manifest, last.
    std::uint64_t manifest_bytes = 0;
    if (pipeline.rank() == 0) {
        try {
            for (std::size_t j = 0; j < stage_count; ++j) {
                manifest.shards.push_back(
                    {std::filesystem::path(shard_path(path, manifest.token, j)).filename().string(), all_bytes[j]});
            }
            write_checkpoint_manifest(path, signature, manifest, records);
            manifest_bytes = std::filesystem::file_size(path);
        } catch (...) {
            failure = std::current_exception();
        }
    }
    detail::fail_together(communicator, failure, "checkpoint '" + path + "'");
    check_mpi(MPI_Bcast(&manifest_bytes, 1, MPI_UINT64_T, 0, communicator), "checkpoint size");
    for (std::size_t j = pipeline.first_stage(); j < pipeline.end_stage(); ++j) {
        remove_stale_shards(path, manifest.token, j);
    }
    std::uint64_t total = manifest_bytes;
    for (std::uint64_t size : all_bytes) total += size;
    return total;
}

// Collective. Returns the bytes written by all ranks, on every rank.
template <class Network, auto Cuts, class Optimizer, class T, class Records>
std::uint64_t save_mpi_checkpoint(const std::string& path, std::uint64_t signature,
                                  mpi_pipeline<Network, Cuts, Optimizer, T>& pipeline, Records&& records)
{
    if (pipeline.replicas() == 1) return save_replica_checkpoint(path, signature, pipeline, records);
    std::uint64_t total = 0;
    std::exception_ptr failure;
    if (pipeline.replica() == 0) {
        try {
            total = save_replica_checkpoint(path, signature, pipeline, records);
        } catch (...) {
            failure = std::current_exception();
        }
    }
    detail::fail_together(pipeline.job_communicator(), failure, "checkpoint '" + path + "'");
    check_mpi(MPI_Bcast(&total, 1, MPI_UINT64_T, 0, pipeline.job_communicator()), "checkpoint size");
    return total;
}

// Collective: every rank (of every replica) reads the manifest (and
// records(archive)), then its own stages' shards. Before the epoch's first
// feed.
template <class Network, auto Cuts, class Optimizer, class T, class Records>
void load_mpi_checkpoint(const std::string& path, std::uint64_t signature,
                         mpi_pipeline<Network, Cuts, Optimizer, T>& pipeline, Records&& records)
{
    std::exception_ptr failure;
    try {
        const checkpoint_manifest manifest = read_checkpoint_manifest(path, signature, Cuts.size() - 1, records);
        for (std::size_t j = pipeline.first_stage(); j < pipeline.end_stage(); ++j) {
            read_checkpoint_shard(path, signature, manifest, j,
                                  [&](checkpoint_reader& in) { pipeline.transfer_stage_state(j, in, {}); });
        }
    } catch (...) {
        failure = std::current_exception();
    }
    detail::fail_together(pipeline.job_communicator(), failure, "checkpoint '" + path + "'");
}

} // namespace petra
