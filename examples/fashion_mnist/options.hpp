// The job's options as a user states them (job_options: the command line's
// words, or a test's), and the recipe they are checked and parsed into once
// (training_recipe): every figure a run's numbers depend on, the method and
// the schedule as enums. Nothing past checked_recipe reads a name.
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include <petra/petra.hpp>

#include "model.hpp"

namespace fashion {

// The network trained (model.hpp): reference_net or reversible_net.
enum class network_kind { reference, reversible };
enum class method { petra, backprop, reversible_backprop };
// Who runs PETRA's stages: one thread each, the sequential simulator on the
// caller's thread, or MPI ranks (mpirun -np R, R <= J). All three compute
// the same numbers, so a checkpoint of one resumes on another.
enum class driver { threads, simulator, mpi };
using decay = petra::learning_rate_schedule::decay;

// PETRA cuts the network into at most one stage per block (the
// partitioner leaves no stage empty): J = 1 to the block count, 10 for
// both networks. On threads, J may exceed the cores: a stage waiting for
// its neighbour sleeps on a condition variable (channel.hpp) and gives its
// core to the others; --driver simulator runs any J on one thread.
inline constexpr std::size_t max_stages = reference_net::block_count; // both networks' (model.hpp)

template <class Choice>
struct named {
    Choice value;
    std::string_view name;
};

inline constexpr std::array<named<network_kind>, 2> network_names{
    {{network_kind::reference, "reference"}, {network_kind::reversible, "reversible"}}};
inline constexpr std::array<named<method>, 3> method_names{
    {{method::petra, "petra"}, {method::backprop, "backprop"}, {method::reversible_backprop, "reversible-backprop"}}};
inline constexpr std::array<named<driver>, 3> driver_names{
    {{driver::threads, "threads"}, {driver::simulator, "simulator"}, {driver::mpi, "mpi"}}};
inline constexpr std::array<named<decay>, 3> schedule_names{
    {{decay::cosine, "cosine"}, {decay::step, "step"}, {decay::constant, "constant"}}};
inline constexpr std::array<named<petra::precision>, 2> precision_names{
    {{petra::precision::fp32, "fp32"}, {petra::precision::bf16, "bf16"}}};

template <class Choice, std::size_t N>
std::optional<Choice> choice_named(const std::array<named<Choice>, N>& names, std::string_view text)
{
    for (const named<Choice>& entry : names) {
        if (entry.name == text) return entry.value;
    }
    return std::nullopt;
}

template <class Choice, std::size_t N>
std::string_view name_in(const std::array<named<Choice>, N>& names, Choice value)
{
    for (const named<Choice>& entry : names) {
        if (entry.value == value) return entry.name;
    }
    return "?";
}

inline std::string_view name_of(network_kind value) { return name_in(network_names, value); }
inline std::string_view name_of(method value) { return name_in(method_names, value); }
inline std::string_view name_of(decay value) { return name_in(schedule_names, value); }
inline std::string_view name_of(driver value) { return name_in(driver_names, value); }

struct job_options {
    std::string network = "reference"; // reference | reversible
    std::string method = "petra";      // petra | backprop | reversible-backprop
    std::size_t stages = 4;            // PETRA only: 1 to max_stages
    std::string driver = "threads";    // PETRA only: threads | simulator | mpi
    // PETRA only, on the simulator or MPI ranks: copies of the pipeline,
    // each training on its shard of a global micro-batch of replicas x
    // batch examples (petra::pipeline_options::replicas).
    std::size_t replicas = 1;
    std::size_t accumulation = 1; // micro-batches per optimizer step
    std::size_t epochs = 2;
    std::size_t batch = 64;
    double learning_rate = 0.05; // peak, after the warm-up
    double warmup_epochs = 0.5;
    // PETRA only: stage j's rate divided by (1 + its delay in steps)^p
    // (petra::pipeline_options::delay_rate_exponent); 0: the same rate for all.
    double delay_rate_exponent = 0;
    std::string schedule = "cosine"; // cosine | step | constant
    // What the training steps' products are computed in: fp32 | bf16
    // (petra::pipeline_options::precision; bf16 needs AMX or AVX512-BF16).
    // Evaluation is in fp32 either way. Not pinned by a checkpoint: a run
    // may resume in the other precision (on a CPU without bf16, say).
    std::string precision = "fp32";
    double momentum = 0.9;
    double weight_decay = 5e-4;
    bool augment = false;
    std::uint64_t seed = 1;
    std::string data_dir = "/usr/share/datasets/fashion-mnist";
    std::string metrics_path;  // CSV, one row per epoch; empty: none
    std::string summary_path;  // the JSON summary, also written here; empty: stdout only
    std::size_t max_steps = 0; // cap on micro-batches trained; 0: none
    bool quiet = false;        // no progress on stderr
    // Checkpoints: written to checkpoint_path every checkpoint_every
    // micro-batches (0: never on a count), when a stop is requested and at
    // the end. resume: start from it (it must exist; without resume it must
    // not, so that a run never overwrites another's checkpoint by mistake).
    std::string checkpoint_path;
    std::size_t checkpoint_every = 500;
    bool resume = false;
    // Asked before every micro-batch; true: save the checkpoint and stop
    // (the front end sets it from SIGINT and SIGTERM).
    std::function<bool()> stop_requested;
    // Called after each checkpoint is saved, with the step it was saved at.
    std::function<void(std::size_t step)> checkpoint_saved;
    // PETRA only: every fidelity_every micro-batches, the gradient each
    // stage computes is compared with the true gradient (fidelity.hpp); one
    // row per stage in the fidelity file, next to the metrics file
    // (fidelity_path_of). 0: never.
    std::size_t fidelity_every = 0;
    // Weights files (the whole network in one process, so not with --driver
    // mpi): init_weights_path, an .npz file the run starts from instead of
    // the seed's parameters (a fresh run only: a resumed run goes on from
    // its checkpoint); save_weights_path (.npz) and onnx_path (the inference
    // graph, ONNX) written at the end of a finished run. Empty: none.
    std::string init_weights_path;
    std::string save_weights_path;
    std::string onnx_path;
    // Under MPI (set by the front end): whether this process reads the data
    // files (the rank that feeds), and how the data's sizes reach the ranks
    // that do not (a broadcast from the one that does).
    bool loads_data = true;
    std::function<void(std::size_t& train_size, std::size_t& test_size)> share_data_sizes;
};

// What a run's numbers depend on: a checkpoint resumes only under the same
// recipe (run_checkpoint.hpp).
struct training_recipe {
    network_kind network = network_kind::reference;
    fashion::method method = fashion::method::petra;
    std::size_t stages = 1;                            // PETRA's J; 1 for the sequential methods
    fashion::driver driver = fashion::driver::threads; // PETRA's; not part of the numbers
    std::size_t replicas = 1;                          // PETRA's; a micro-batch is replicas x batch examples
    std::size_t accumulation = 1;
    std::size_t epochs = 1;
    std::size_t batch = 2;
    std::size_t max_steps = 0; // 0: none
    double learning_rate = 0;
    double warmup_epochs = 0;
    double delay_rate_exponent = 0; // PETRA's; 0 for the sequential methods
    decay schedule = decay::cosine;
    petra::precision precision = petra::precision::fp32;
    double momentum = 0;
    double weight_decay = 0;
    bool augment = false;
    std::uint64_t seed = 0;

    // PETRA's pipeline options for the run.
    petra::pipeline_options pipeline() const
    {
        return {.batch = batch,
                .accumulation = accumulation,
                .delay_rate_exponent = delay_rate_exponent,
                .replicas = replicas,
                .precision = precision};
    }

    // Examples in one micro-batch of the data: every replica's shard.
    std::size_t global_batch() const { return batch * replicas; }

    // The run's budget and learning-rate schedule, over the data's
    // micro-batches per epoch.
    petra::training_plan plan(std::size_t batches_per_epoch) const
    {
        return {{.epochs = epochs,
                 .batches_per_epoch = batches_per_epoch,
                 .accumulation = accumulation,
                 .max_micro_batches = max_steps},
                {.peak = learning_rate, .warmup_epochs = warmup_epochs, .shape = schedule}};
    }

    // Nesterov SGD with the run's momentum and weight decay, for every method.
    petra::sgd_options optimizer() const
    {
        return {.momentum = momentum, .nesterov = true, .weight_decay = weight_decay};
    }
};

// A usage error: the option it names is wrong (the front end exits with 2).
[[noreturn]] inline void refuse_option(const std::string& what) { throw std::invalid_argument(what); }

// Checks every option and parses the names; throws std::invalid_argument
// naming the first option that is wrong.
inline training_recipe checked_recipe(const job_options& options)
{
    const std::optional<network_kind> trained = choice_named(network_names, options.network);
    if (!trained) refuse_option("--network must be reference or reversible, not '" + options.network + "'.");
    const std::optional<method> chosen = choice_named(method_names, options.method);
    if (!chosen) {
        refuse_option("--method must be petra, backprop or reversible-backprop, not '" + options.method + "'.");
    }
    if (options.stages < 1 || options.stages > max_stages) {
        refuse_option("--stages must be 1 to " + std::to_string(max_stages) +
                      ", the network's block count (every stage holds at least one block), not " +
                      std::to_string(options.stages) + ".");
    }
    if (options.accumulation == 0) refuse_option("--accumulation must be at least 1.");
    if (options.batch < 2) refuse_option("--batch must be at least 2 (batch normalisation needs two examples).");
    if (options.epochs == 0) refuse_option("--epochs must be at least 1.");
    if (!(options.learning_rate > 0) || !std::isfinite(options.learning_rate)) refuse_option("--lr must be positive.");
    if (!(options.warmup_epochs >= 0) || !std::isfinite(options.warmup_epochs)) {
        refuse_option("--warmup must be a number of epochs, 0 or more.");
    }
    if (!(options.delay_rate_exponent >= 0) || !std::isfinite(options.delay_rate_exponent)) {
        refuse_option("--delay-rate-exponent must be a number, 0 or more.");
    }
    if (options.delay_rate_exponent != 0 && chosen != method::petra) {
        refuse_option("--delay-rate-exponent scales PETRA's stages' rates: it needs --method petra.");
    }
    if (!(options.momentum >= 0 && options.momentum < 1)) refuse_option("--momentum must be in [0, 1).");
    if (!(options.weight_decay >= 0) || !std::isfinite(options.weight_decay)) {
        refuse_option("--weight-decay must be 0 or more.");
    }
    if (options.fidelity_every != 0 && chosen != method::petra) {
        refuse_option("--fidelity-every measures PETRA's gradients against backprop's: it needs --method petra.");
    }
    if (options.fidelity_every != 0 && options.metrics_path.empty()) {
        refuse_option("--fidelity-every writes next to the metrics file: it needs --metrics PATH.");
    }
    const std::optional<driver> runner = choice_named(driver_names, options.driver);
    if (!runner) refuse_option("--driver must be threads, simulator or mpi, not '" + options.driver + "'.");
    if (*runner != driver::threads && chosen != method::petra) {
        refuse_option("--driver " + options.driver + " runs PETRA's stages: it needs --method petra.");
    }
    if (options.replicas == 0) refuse_option("--replicas must be at least 1.");
    if (options.replicas > 1 && (chosen != method::petra || *runner == driver::threads)) {
        refuse_option("--replicas copies PETRA's pipeline on the simulator or on MPI ranks: it needs --method petra "
                      "and --driver simulator or mpi.");
    }
    if (options.replicas > 1 && options.fidelity_every != 0) {
        refuse_option("--fidelity-every follows one pipeline's gradients: not with --replicas.");
    }
    if (options.replicas > 1 && *runner == driver::simulator && !options.checkpoint_path.empty()) {
        refuse_option("--checkpoint with --replicas needs --driver mpi: the simulator does not checkpoint replicas.");
    }
    if (options.fidelity_every != 0 && *runner == driver::mpi) {
        refuse_option("--fidelity-every needs the whole network in one process: not with --driver mpi.");
    }
    const bool weights_files =
        !options.init_weights_path.empty() || !options.save_weights_path.empty() || !options.onnx_path.empty();
    if (weights_files && *runner == driver::mpi) {
        refuse_option("--init-weights, --save-weights and --export-onnx need the whole network in one process: not "
                      "with --driver mpi.");
    }
    if (!options.init_weights_path.empty() && options.resume) {
        refuse_option("--init-weights starts a run from weights; a resumed run goes on from its checkpoint: leave "
                      "it out with --resume.");
    }
    const std::optional<decay> schedule = choice_named(schedule_names, options.schedule);
    if (!schedule) refuse_option("--schedule must be cosine, step or constant, not '" + options.schedule + "'.");
    const std::optional<petra::precision> arithmetic = choice_named(precision_names, options.precision);
    if (!arithmetic) refuse_option("--precision must be fp32 or bf16, not '" + options.precision + "'.");
    try {
        petra::require_precision(*arithmetic);
    } catch (const std::invalid_argument& error) {
        refuse_option("--precision " + options.precision + ": " + error.what());
    }
    return {.network = *trained,
            .method = *chosen,
            .stages = *chosen == method::petra ? options.stages : 1,
            .driver = *runner,
            .replicas = options.replicas,
            .accumulation = options.accumulation,
            .epochs = options.epochs,
            .batch = options.batch,
            .max_steps = options.max_steps,
            .learning_rate = options.learning_rate,
            .warmup_epochs = options.warmup_epochs,
            .delay_rate_exponent = options.delay_rate_exponent,
            .schedule = *schedule,
            .precision = *arithmetic,
            .momentum = options.momentum,
            .weight_decay = options.weight_decay,
            .augment = options.augment,
            .seed = options.seed};
}

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

} // namespace fashion
