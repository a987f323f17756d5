// The run's checkpoint: its recipe (a run resumes only under the same one),
// its position, the parameters and the method's state. For PETRA, one shard
// per stage and a manifest that holds the recipe and the position
// (petra/train/sharded_checkpoint.hpp), whatever the driver, so that a run
// saved on threads resumes on MPI ranks and back; for the sequential
// methods, one file, in that order. Either way written whole or not at all.
#pragma once

#include <array>
#include <chrono>
#include <concepts>
#include <cstdint>
#include <cstddef>
#include <filesystem>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#include <petra/petra.hpp>

#include "options.hpp"
#include "run_state.hpp"

namespace fashion {

// --resume needs a checkpoint to resume; without it, an existing one is
// never overwritten. Throws std::invalid_argument.
inline void check_checkpoint_options(const job_options& options)
{
    if (options.resume && options.checkpoint_path.empty()) {
        refuse_option("--resume needs --checkpoint PATH, the checkpoint to resume.");
    }
    if (!options.resume && !options.checkpoint_path.empty() && std::filesystem::exists(options.checkpoint_path)) {
        refuse_option("--checkpoint " + options.checkpoint_path +
                      " exists: pass --resume to go on with it, or remove it to start afresh.");
    }
}

// Loading: the option differs from the checkpoint's run.
template <class Stored, class Asked>
[[noreturn]] void refuse_other_option(const std::string& option, const Stored& stored, const Asked& asked)
{
    std::ostringstream text;
    text << option << ": the checkpoint's run used " << stored << ", this command asks for " << asked
         << "; resume with the options the run started with.";
    throw std::invalid_argument(text.str());
}

// Loading: the first option of the checkpoint's recipe that differs from
// the one asked, named (std::invalid_argument). The method and schedule come
// as stored, by name.
inline void refuse_other_recipe(const training_recipe& saved, const std::string& saved_method,
                                const std::string& saved_schedule, const training_recipe& asked)
{
    if (choice_named(method_names, saved_method) != asked.method) {
        refuse_other_option("--method", saved_method, name_of(asked.method));
    }
    if (asked.method == method::petra && saved.stages != asked.stages) {
        refuse_other_option("--stages", saved.stages, asked.stages);
    }
    if (saved.accumulation != asked.accumulation) {
        refuse_other_option("--accumulation", saved.accumulation, asked.accumulation);
    }
    if (saved.epochs != asked.epochs) refuse_other_option("--epochs", saved.epochs, asked.epochs);
    if (saved.batch != asked.batch) refuse_other_option("--batch", saved.batch, asked.batch);
    if (saved.max_steps != asked.max_steps) refuse_other_option("--max-steps", saved.max_steps, asked.max_steps);
    if (saved.seed != asked.seed) refuse_other_option("--seed", saved.seed, asked.seed);
    if (saved.augment != asked.augment) {
        refuse_other_option("--augment", saved.augment ? "on" : "off", asked.augment ? "on" : "off");
    }
    if (choice_named(schedule_names, saved_schedule) != asked.schedule) {
        refuse_other_option("--schedule", saved_schedule, name_of(asked.schedule));
    }
    if (saved.learning_rate != asked.learning_rate) {
        refuse_other_option("--lr", saved.learning_rate, asked.learning_rate);
    }
    if (saved.warmup_epochs != asked.warmup_epochs) {
        refuse_other_option("--warmup", saved.warmup_epochs, asked.warmup_epochs);
    }
    if (saved.delay_rate_exponent != asked.delay_rate_exponent) {
        refuse_other_option("--delay-rate-exponent", saved.delay_rate_exponent, asked.delay_rate_exponent);
    }
    if (saved.momentum != asked.momentum) refuse_other_option("--momentum", saved.momentum, asked.momentum);
    if (saved.weight_decay != asked.weight_decay) {
        refuse_other_option("--weight-decay", saved.weight_decay, asked.weight_decay);
    }
}

// The recipe and the data's micro-batches per epoch. Loading compares and
// names the first that differs (std::invalid_argument).
template <petra::state_archive Archive>
void transfer_configuration(Archive& archive, const training_recipe& recipe, std::size_t batches_per_epoch)
{
    training_recipe saved = recipe;
    std::string method_name(name_of(recipe.method)), schedule_name(name_of(recipe.schedule));
    std::size_t seed = saved.seed;
    archive.section("job options");
    archive.text(method_name);
    archive.text(schedule_name);
    archive.count(saved.stages, petra::any_count);
    archive.count(saved.accumulation, petra::any_count);
    archive.count(saved.epochs, petra::any_count);
    archive.count(saved.batch, petra::any_count);
    archive.count(saved.max_steps, petra::any_count);
    archive.count(seed, petra::any_count);
    petra::transfer_flag(archive, saved.augment);
    std::array<double, 5> rates{saved.learning_rate, saved.warmup_epochs, saved.momentum, saved.weight_decay,
                                saved.delay_rate_exponent};
    archive.values(std::span<double>(rates));
    std::size_t saved_batches_per_epoch = batches_per_epoch;
    archive.count(saved_batches_per_epoch, petra::any_count);
    if constexpr (Archive::loading) {
        saved.seed = seed;
        saved.learning_rate = rates[0];
        saved.warmup_epochs = rates[1];
        saved.momentum = rates[2];
        saved.weight_decay = rates[3];
        saved.delay_rate_exponent = rates[4];
        refuse_other_recipe(saved, method_name, schedule_name, recipe);
        if (saved_batches_per_epoch != batches_per_epoch) {
            throw std::invalid_argument("the training set gives " + std::to_string(batches_per_epoch) +
                                        " micro-batches per epoch here, " + std::to_string(saved_batches_per_epoch) +
                                        " in the checkpoint's run: resume on the same data.");
        }
    }
}

// The run's position, finished epochs and augmentation generator.
template <petra::state_archive Archive>
void transfer_position(Archive& archive, run_position& position)
{
    archive.section("position");
    archive.count(position.epoch, petra::any_count);
    archive.count(position.batch, petra::any_count);
    archive.count(position.steps, petra::any_count);
    archive.values(std::span<double>(&position.training_seconds, 1));
    std::string generator;
    if constexpr (!Archive::loading) {
        std::ostringstream text;
        text << position.generator;
        generator = text.str();
    }
    archive.text(generator);
    if constexpr (Archive::loading) {
        std::istringstream text(generator);
        text >> position.generator;
        if (!text) throw petra::checkpoint_error("checkpoint: the augmentation generator's state cannot be read.");
    }
    std::size_t finished = position.epochs.size();
    archive.count(finished, position.epoch);
    position.epochs.resize(finished);
    for (epoch_record& record : position.epochs) {
        std::array<double, 8> fields{double(record.epoch), double(record.steps), record.train_loss,
                                     record.train_accuracy,  record.test_loss,   record.test_accuracy,
                                     record.seconds,         record.learning_rate};
        archive.values(std::span<double>(fields));
        record = {std::size_t(fields[0]), std::size_t(fields[1]), fields[2], fields[3],
                  fields[4],              fields[5],              fields[6], fields[7]};
    }
}

// A method whose state lives in one shard per stage (PETRA, whatever its
// driver): it saves and loads itself at a path, with the run's records
// (recipe and position) in the manifest. The other methods' state goes in
// one file, after those records (transfer_state).
template <class M>
concept sharded_checkpoint_method = requires(M& method, const std::string& path) {
    { method.save_checkpoint(path, [](auto&) {}) } -> std::same_as<std::uint64_t>;
    method.load_checkpoint(path, [](auto&) {});
};

class run_checkpoint {
public:
    // An empty path: no checkpoints. network_signature: the trained
    // network's (Net::signature); a checkpoint of another is refused.
    run_checkpoint(std::string path, const training_recipe& recipe, std::size_t batches_per_epoch,
                   std::uint64_t network_signature)
        : path_(std::move(path)), recipe_(recipe), batches_per_epoch_(batches_per_epoch),
          network_signature_(network_signature)
    {
    }

    bool enabled() const { return !path_.empty(); }
    const std::string& path() const { return path_; }

    // Pauses the method (the parameters are read: every stage must be done
    // with them), then saves; the position's time includes what the clock
    // has run since it last counted. Written whole or not at all: the
    // previous checkpoint stays until the new one is complete.
    template <class Method>
    void save(run_position& position, const training_clock& clock, Method& method)
    {
        [[maybe_unused]] const auto paused = method.pause();
        const double counted = position.training_seconds;
        position.training_seconds += clock.elapsed();
        const auto start = std::chrono::steady_clock::now();
        if constexpr (sharded_checkpoint_method<Method>) {
            last_bytes_ = method.save_checkpoint(path_, [&](auto& archive) { transfer_run(archive, position); });
        } else {
            petra::checkpoint_writer out(path_, network_signature_);
            transfer_run(out, position);
            method.transfer_state(out); // the parameters first
            out.commit();
            last_bytes_ = std::filesystem::file_size(path_);
        }
        position.training_seconds = counted;
        last_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }

    // Throws petra::checkpoint_error for a missing or bad file (or shard),
    // std::invalid_argument for a run of another recipe.
    template <class Method>
    void load(run_position& position, Method& method)
    {
        if constexpr (sharded_checkpoint_method<Method>) {
            method.load_checkpoint(path_, [&](auto& archive) { transfer_run(archive, position); });
        } else {
            petra::checkpoint_reader in(path_, network_signature_);
            transfer_run(in, position);
            method.transfer_state(in);
            in.finish();
        }
    }

    // The last checkpoint saved: its size (all its files) and how long
    // writing it took.
    std::size_t last_bytes() const { return last_bytes_; }
    double last_seconds() const { return last_seconds_; }

private:
    template <class Archive>
    void transfer_run(Archive& archive, run_position& position)
    {
        transfer_configuration(archive, recipe_, batches_per_epoch_);
        transfer_position(archive, position);
    }

    std::string path_;
    const training_recipe& recipe_;
    std::size_t batches_per_epoch_;
    std::uint64_t network_signature_;
    std::size_t last_bytes_ = 0;
    double last_seconds_ = 0;
};

} // namespace fashion
