// Checkpoints in one file per stage (floor 8): a shard per stage, written
// by whoever runs the stage (a thread pipeline's caller, or each MPI rank
// for its own stages), and a small manifest, written LAST, that names them.
// Every file is a checkpoint file of train/checkpoint.hpp (checksummed,
// written to a temporary name and renamed), so a save interrupted anywhere
// leaves the previous manifest and the shards it names untouched: the
// previous checkpoint stays loadable.
//
//   save_sharded_checkpoint(path, net::signature, pipeline, [&](auto& archive) { ... the caller's records ... });
//   load_sharded_checkpoint(path, net::signature, pipeline, [&](auto& archive) { ... the same records ... });
//
// Files, for a checkpoint at PATH: the manifest at PATH; stage j's shard at
// PATH.<token>.stage<j>, the token a number drawn afresh for each save, so
// that a new save never writes over a shard the current manifest names.
// - A shard: section "checkpoint shard", the token, the stage index, then
//   the stage's records (pipeline core.hpp: transfer_stage_state, the same
//   whatever the driver).
// - The manifest: the caller's records first (a job's options and
//   position, so that a checkpoint of other options is refused by them, in
//   either format), then section "checkpoint manifest", the token, the
//   stage count, each shard's file name (relative to the manifest's
//   directory) and size in bytes.
// Reading checks the manifest, then each shard against it: a shard that is
// missing, of another size (truncated), damaged, or of another save (its
// token) is a checkpoint_error naming the shard and its stage.
//
// A checkpoint of J stages loads into any pipeline of the same network,
// cuts and options, whatever the driver: threads, the simulator, or MPI
// ranks in any number (mpi/checkpoint.hpp).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <system_error>
#include <vector>

#include <petra/state_archive.hpp>
#include <petra/train/checkpoint.hpp>

namespace petra {

struct checkpoint_shard {
    std::string file;        // relative to the manifest's directory
    std::uint64_t bytes = 0; // the whole file
};

struct checkpoint_manifest {
    std::uint64_t token = 0;
    std::vector<checkpoint_shard> shards; // one per stage, in order
};

// A fresh token for a save: no two saves share one.
inline std::uint64_t new_checkpoint_token()
{
    std::random_device entropy;
    const std::uint64_t high = entropy(), low = entropy();
    const auto now = std::uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
    return ((high << 32) ^ low ^ now) | 1;
}

// The file name of stage `stage`'s shard of the save `token`, beside the
// manifest at manifest_path.
inline std::string shard_path(const std::string& manifest_path, std::uint64_t token, std::size_t stage)
{
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(token));
    return manifest_path + "." + hex + ".stage" + std::to_string(stage);
}

// Writes stage `stage`'s shard: fill(archive) writes the stage's records.
// Returns its size in bytes.
template <class Fill>
std::uint64_t write_checkpoint_shard(const std::string& manifest_path, std::uint64_t signature, std::uint64_t token,
                                     std::size_t stage, Fill&& fill)
{
    const std::string path = shard_path(manifest_path, token, stage);
    checkpoint_writer out(path, signature);
    out.section("checkpoint shard");
    std::size_t stored_token = std::size_t(token);
    out.count(stored_token, any_count);
    out.expect(stage, "stage index");
    fill(out);
    out.commit();
    return std::filesystem::file_size(path);
}

// The manifest's own records, both ways.
template <state_archive Archive>
void transfer_manifest(Archive& archive, checkpoint_manifest& manifest)
{
    archive.section("checkpoint manifest");
    std::size_t token = std::size_t(manifest.token);
    archive.count(token, any_count);
    manifest.token = token;
    std::size_t stages = manifest.shards.size();
    archive.count(stages, 4096);
    manifest.shards.resize(stages);
    for (checkpoint_shard& shard : manifest.shards) {
        archive.text(shard.file);
        std::size_t bytes = std::size_t(shard.bytes);
        archive.count(bytes, any_count);
        shard.bytes = bytes;
    }
}

// Writes the manifest over the previous one: records(archive), the
// caller's own, then the shards of `manifest`.
template <class Records>
void write_checkpoint_manifest(const std::string& path, std::uint64_t signature, checkpoint_manifest& manifest,
                               Records&& records)
{
    checkpoint_writer out(path, signature);
    records(out);
    transfer_manifest(out, manifest);
    out.commit();
}

// Reads records(archive), the caller's own, and the manifest at path;
// checks that it names stage_count shards.
template <class Records>
checkpoint_manifest read_checkpoint_manifest(const std::string& path, std::uint64_t signature, std::size_t stage_count,
                                             Records&& records)
{
    checkpoint_reader in(path, signature);
    records(in);
    checkpoint_manifest manifest;
    transfer_manifest(in, manifest);
    in.finish();
    if (manifest.shards.size() != stage_count) {
        throw checkpoint_error("checkpoint '" + path + "' names " + std::to_string(manifest.shards.size()) +
                               " stage shards; this pipeline has " + std::to_string(stage_count) + " stages.");
    }
    return manifest;
}

// Reads stage `stage`'s shard as the manifest at manifest_path names it:
// fill(archive) reads the stage's records.
template <class Fill>
void read_checkpoint_shard(const std::string& manifest_path, std::uint64_t signature,
                           const checkpoint_manifest& manifest, std::size_t stage, Fill&& fill)
{
    const checkpoint_shard& shard = manifest.shards.at(stage);
    const std::filesystem::path directory = std::filesystem::path(manifest_path).parent_path();
    const std::string path = (directory / shard.file).string();
    const auto refuse = [&](const std::string& what) {
        throw checkpoint_error("checkpoint '" + manifest_path + "': the shard of stage " + std::to_string(stage) +
                               ", '" + path + "', " + what + ".");
    };
    std::error_code error;
    const std::uintmax_t bytes = std::filesystem::file_size(path, error);
    if (error) refuse("is missing (" + error.message() + ")");
    if (bytes != shard.bytes) {
        refuse("has " + std::to_string(bytes) + " bytes where the manifest says " + std::to_string(shard.bytes) +
               (bytes < shard.bytes ? " (truncated)" : " (another file)"));
    }
    checkpoint_reader in(path, signature);
    in.section("checkpoint shard");
    std::size_t token = 0;
    in.count(token, any_count);
    if (std::uint64_t(token) != manifest.token) refuse("belongs to another save or another run (its token differs)");
    in.expect(stage, "stage index");
    fill(in);
    in.finish();
}

// Removes this checkpoint's shards of stage `stage` from saves other than
// `token` (the previous save's, once a new manifest names the new ones, and
// those of saves that were interrupted).
inline void remove_stale_shards(const std::string& manifest_path, std::uint64_t token, std::size_t stage)
{
    const std::filesystem::path manifest(manifest_path);
    const std::filesystem::path directory = manifest.has_parent_path() ? manifest.parent_path() : ".";
    const std::string prefix = manifest.filename().string() + ".";
    const std::string suffix = ".stage" + std::to_string(stage);
    const std::string keep = std::filesystem::path(shard_path(manifest_path, token, stage)).filename().string();
    std::error_code error;
    for (const auto& entry : std::filesystem::directory_iterator(directory, error)) {
        const std::string name = entry.path().filename().string();
        const bool shard =
            name.size() == prefix.size() + 16 + suffix.size() && name.starts_with(prefix) && name.ends_with(suffix);
        if (shard && name != keep) std::filesystem::remove(entry.path(), error);
    }
}

// A pipeline in one process (thread_pipeline or sequential_pipeline): every
// stage's shard, then the manifest with records(archive). Returns the bytes
// written.
template <class Pipeline, class Records>
std::uint64_t save_sharded_checkpoint(const std::string& path, std::uint64_t signature, Pipeline& pipeline,
                                      Records&& records)
{
    const auto paused = pipeline.pause();
    checkpoint_manifest manifest{new_checkpoint_token(), {}};
    std::uint64_t total = 0;
    for (std::size_t j = 0; j < Pipeline::stage_count; ++j) {
        const std::uint64_t bytes = write_checkpoint_shard(
            path, signature, manifest.token, j, [&](checkpoint_writer& out) { pipeline.transfer_stage_state(j, out); });
        manifest.shards.push_back(
            {std::filesystem::path(shard_path(path, manifest.token, j)).filename().string(), bytes});
        total += bytes;
    }
    write_checkpoint_manifest(path, signature, manifest, records);
    for (std::size_t j = 0; j < Pipeline::stage_count; ++j) remove_stale_shards(path, manifest.token, j);
    return total + std::filesystem::file_size(path);
}

// Restores a pipeline in one process from the checkpoint at path, and the
// caller's records; before the epoch's first feed.
template <class Pipeline, class Records>
void load_sharded_checkpoint(const std::string& path, std::uint64_t signature, Pipeline& pipeline, Records&& records)
{
    const checkpoint_manifest manifest = read_checkpoint_manifest(path, signature, Pipeline::stage_count, records);
    for (std::size_t j = 0; j < Pipeline::stage_count; ++j) {
        read_checkpoint_shard(path, signature, manifest, j,
                              [&](checkpoint_reader& in) { pipeline.transfer_stage_state(j, in); });
    }
}

} // namespace petra
