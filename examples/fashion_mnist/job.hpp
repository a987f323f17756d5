// The Fashion-MNIST job: the reference network trained with PETRA (J stages
// on J threads), exact backprop or reversible backprop, from the same data,
// seed, optimizer and schedule, then scored on the test set. The command-line
// front end is main.cpp; tests call run_job directly on generated data.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <petra/petra.hpp>
#include <petra/train/progress.hpp>

#include "fidelity.hpp"

namespace fashion {

using net = petra::reference_network<>;
using classifier_loss = petra::layer_for<petra::softmax_cross_entropy_loss<10>, petra::shape<10>>;

struct job_options {
    std::string method = "petra"; // petra | backprop | reversible-backprop
    std::size_t stages = 4;       // PETRA only: 1 to 4
    std::size_t accumulation = 1; // micro-batches per optimizer step
    std::size_t epochs = 2;
    std::size_t batch = 64;
    double learning_rate = 0.05; // peak, after the warm-up
    double warmup_epochs = 0.5;
    std::string schedule = "cosine"; // cosine | step | constant
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
};

// "run.csv" -> "run-fidelity.csv"; any other name gets "-fidelity.csv".
inline std::string fidelity_path_of(const std::string& metrics_path)
{
    const bool csv = metrics_path.size() > 4 && metrics_path.compare(metrics_path.size() - 4, 4, ".csv") == 0;
    return (csv ? metrics_path.substr(0, metrics_path.size() - 4) : metrics_path) + "-fidelity.csv";
}

struct epoch_record {
    std::size_t epoch = 0, steps = 0;
    double train_loss = 0, train_accuracy = 0, test_loss = 0, test_accuracy = 0, seconds = 0, learning_rate = 0;
};

struct job_summary {
    job_options options;
    std::size_t steps = 0; // micro-batches trained
    std::size_t epochs_run = 0;
    double test_accuracy = 0, test_loss = 0, train_seconds = 0, examples_per_second = 0;
    std::size_t peak_rss_bytes = 0;
    std::vector<epoch_record> epochs;
    bool interrupted = false;                            // stopped on request before the end
    std::size_t position_epoch = 0, position_batch = 0; // where it stopped: the next micro-batch
    std::string parameter_digest;                        // of the final parameters and statistics
    std::size_t checkpoint_bytes = 0;                    // the last checkpoint saved, if any
    double checkpoint_seconds = 0;                       // and how long saving it took

    std::string json() const
    {
        char text[768];
        std::snprintf(text, sizeof text,
                      "{\"method\": \"%s\", \"stages\": %zu, \"accumulation\": %zu, \"epochs\": %zu, \"steps\": %zu, "
                      "\"batch\": %zu, \"seed\": %llu, \"learning_rate\": %g, \"test_accuracy\": %.4f, "
                      "\"test_loss\": %.4f, \"train_seconds\": %.1f, \"examples_per_second\": %.1f, "
                      "\"peak_rss_bytes\": %zu, \"parameter_digest\": \"%s\"}",
                      options.method.c_str(), options.method == "petra" ? options.stages : 1, options.accumulation,
                      epochs_run, steps, options.batch, static_cast<unsigned long long>(options.seed),
                      options.learning_rate, test_accuracy, test_loss, train_seconds, examples_per_second,
                      peak_rss_bytes, parameter_digest.c_str());
        return text;
    }
};

// Mean loss and accuracy of the network on a dataset (inference mode).
inline std::pair<double, double> evaluate(const petra::network_parameters<net, float>& parameters,
                                          const petra::labelled_images& data)
{
    constexpr std::size_t chunk = 250;
    std::vector<float> logits(chunk * 10);
    double loss_sum = 0;
    std::size_t correct = 0;
    for (std::size_t first = 0; first < data.size(); first += chunk) {
        const std::size_t count = std::min(chunk, data.size() - first);
        const float* images = data.images.data() + first * data.image_size();
        const std::int32_t* labels = data.labels.data() + first;
        petra::predict(parameters, count, images, logits.data());
        const float* scores = logits.data();
        loss_sum += double(classifier_loss::evaluate(count, scores, labels, nullptr)) * double(count);
        correct += classifier_loss::correct(count, scores, labels);
    }
    return {loss_sum / double(data.size()), double(correct) / double(data.size())};
}

inline void check(const job_options& options)
{
    auto fail = [](const std::string& what) { throw std::invalid_argument(what); };
    if (options.method != "petra" && options.method != "backprop" && options.method != "reversible-backprop") {
        fail("--method must be petra, backprop or reversible-backprop, not '" + options.method + "'.");
    }
    if (options.stages < 1 || options.stages > 4) fail("--stages must be 1, 2, 3 or 4.");
    if (options.accumulation == 0) fail("--accumulation must be at least 1.");
    if (options.batch < 2) fail("--batch must be at least 2 (batch normalisation needs two examples).");
    if (options.epochs == 0) fail("--epochs must be at least 1.");
    if (!(options.learning_rate > 0) || !std::isfinite(options.learning_rate)) fail("--lr must be positive.");
    if (!(options.warmup_epochs >= 0) || !std::isfinite(options.warmup_epochs)) {
        fail("--warmup must be a number of epochs, 0 or more.");
    }
    if (!(options.momentum >= 0 && options.momentum < 1)) fail("--momentum must be in [0, 1).");
    if (!(options.weight_decay >= 0) || !std::isfinite(options.weight_decay)) {
        fail("--weight-decay must be 0 or more.");
    }
    if (options.fidelity_every != 0 && options.method != "petra") {
        fail("--fidelity-every measures PETRA's gradients against backprop's: it needs --method petra.");
    }
    if (options.fidelity_every != 0 && options.metrics_path.empty()) {
        fail("--fidelity-every writes next to the metrics file: it needs --metrics PATH.");
    }
    if (options.schedule != "cosine" && options.schedule != "step" && options.schedule != "constant") {
        fail("--schedule must be cosine, step or constant, not '" + options.schedule + "'.");
    }
}

// The pieces of one run that do not depend on the method.
struct run_context {
    const job_options& options;
    const petra::labelled_images& train;
    petra::batch_order order;
    std::size_t batches_per_epoch;
    std::size_t total_steps;
    petra::learning_rate_schedule schedule;
    std::vector<float> images;
    std::vector<std::int32_t> labels;
    std::vector<float> augmentation_scratch;
    // Where gradient-fidelity measurements go (set by run_job when asked).
    std::function<void(std::size_t step, const std::vector<stage_fidelity>&)> record_fidelity;

    run_context(const job_options& job, const petra::labelled_images& train_set)
        : options(job), train(train_set), order(train_set.size(), job.batch, job.seed),
          batches_per_epoch(order.batches()), images(job.batch * net::input::size), labels(job.batch)
    {
        total_steps = job.epochs * batches_per_epoch;
        if (job.max_steps != 0) total_steps = std::min(total_steps, job.max_steps);
        // Each epoch ends with a step on its last partial accumulation.
        std::size_t optimizer_steps = 0;
        for (std::size_t left = total_steps; left > 0;) {
            const std::size_t epoch_steps = std::min(left, batches_per_epoch);
            optimizer_steps += (epoch_steps + job.accumulation - 1) / job.accumulation;
            left -= epoch_steps;
        }
        schedule.peak = job.learning_rate;
        schedule.warmup_steps =
            std::size_t(job.warmup_epochs * double(batches_per_epoch) / double(job.accumulation));
        schedule.total_steps = optimizer_steps;
        schedule.shape = job.schedule == "cosine" ? petra::learning_rate_schedule::decay::cosine
                         : job.schedule == "step" ? petra::learning_rate_schedule::decay::step
                                                  : petra::learning_rate_schedule::decay::constant;
        if (schedule.shape == petra::learning_rate_schedule::decay::step) {
            schedule.milestones = {optimizer_steps / 2, optimizer_steps * 3 / 4, 0, 0};
        }
    }

    // Nesterov SGD with the run's momentum and weight decay, for every method.
    petra::sgd_options optimizer_options() const
    {
        return {.momentum = options.momentum, .nesterov = true, .weight_decay = options.weight_decay};
    }

    // Micro-batch b of the current epoch's order into images and labels
    // (augmented if asked, with the epoch's generator).
    void load(std::size_t b, std::mt19937_64& generator)
    {
        petra::gather_batch(train, order.batch(b), images.data(), labels.data());
        if (options.augment) {
            petra::augment_batch(images.data(), options.batch, 1, 28, 28,
                                 {.padding = 2, .flip = true, .fill = petra::fashion_mnist_normalisation.black()},
                                 generator, augmentation_scratch);
        }
    }
};

// Where a run stands: the next micro-batch to train, the time spent, the
// augmentation generator, the finished epochs. With the method's state and
// the parameters, what a checkpoint holds.
struct run_position {
    std::size_t epoch = 0; // the current epoch, from 0
    std::size_t batch = 0; // the next micro-batch of this epoch's order
    std::size_t steps = 0; // micro-batches trained in the whole run
    double training_seconds = 0;
    std::mt19937_64 generator; // this epoch's augmentation generator
    std::vector<epoch_record> epochs;
};

// Exact or reversible backprop with SGD on the caller's thread.
template <class Trainer>
class sequential_method {
public:
    sequential_method(const run_context& run, petra::network_parameters<net, float>&)
        : run_(run), trainer_(run.options.batch),
          optimizer_(run.optimizer_options(), net::weight_mask<float>()),
          gradient_(net::parameter_count, 0.0f)
    {
    }

    void train(petra::network_parameters<net, float>& parameters, const run_position& position)
    {
        const job_options& options = run_.options;
        const float loss = trainer_.accumulate_gradient(parameters, options.batch, run_.images.data(),
                                                        run_.labels.data(), gradient_);
        if (!std::isfinite(loss)) {
            throw std::runtime_error("the loss of micro-batch " + std::to_string(position.batch) + " of epoch " +
                                     std::to_string(position.epoch + 1) + " is not finite (" + std::to_string(loss) +
                                     "): training diverged.");
        }
        statistics_.loss_sum += loss;
        statistics_.correct += classifier_loss::correct(options.batch, trainer_.logits().data(), run_.labels.data());
        statistics_.micro_batches += 1;
        statistics_.examples += options.batch;
        if (++pending_ == options.accumulation) step(parameters);
    }

    petra::epoch_statistics progress() const { return statistics_; }

    // The epoch's last partial accumulation is applied, and its statistics
    // returned.
    petra::epoch_statistics end_epoch(petra::network_parameters<net, float>& parameters)
    {
        if (pending_ > 0) step(parameters);
        return std::exchange(statistics_, {});
    }

    // Nothing runs between train() calls: there is nothing to hold.
    struct nothing_running {};
    nothing_running pause() { return {}; }

    template <petra::state_archive Archive>
    void transfer_state(Archive& archive)
    {
        archive.section("sequential trainer");
        optimizer_.transfer_state(archive);
        archive.values(std::span<float>(gradient_));
        archive.count(pending_, run_.options.accumulation);
        archive.count(optimizer_steps_, petra::any_count);
        archive.count(statistics_.micro_batches, petra::any_count);
        archive.count(statistics_.examples, petra::any_count);
        archive.count(statistics_.correct, petra::any_count);
        archive.values(std::span<double>(&statistics_.loss_sum, 1));
    }

private:
    void step(petra::network_parameters<net, float>& parameters)
    {
        optimizer_.step(parameters.values(), gradient_, pending_, run_.schedule(optimizer_steps_++));
        std::fill(gradient_.begin(), gradient_.end(), 0.0f);
        pending_ = 0;
    }

    const run_context& run_;
    Trainer trainer_;
    petra::sgd<float> optimizer_;
    std::vector<float> gradient_;
    std::size_t pending_ = 0;
    std::size_t optimizer_steps_ = 0;
    petra::epoch_statistics statistics_;
};

// PETRA: J stages on J threads.
template <std::size_t Stages>
class petra_method {
public:
    static constexpr auto cuts = petra::partition<net, Stages>();

    petra_method(const run_context& run, petra::network_parameters<net, float>& parameters)
        : run_(run),
          pipeline_(parameters, run.optimizer_options(), run.schedule,
                    {.batch = run.options.batch, .accumulation = run.options.accumulation})
    {
        if (run.options.fidelity_every != 0) {
            probe_ = std::make_unique<fidelity_probe<net, cuts>>(run.options.batch);
            pipeline_.set_trace([probe = probe_.get()](const petra::pipeline_event<float>& event) {
                probe->observe(event);
            });
        }
    }

    void train(petra::network_parameters<net, float>&, const run_position& position)
    {
        if (!probe_) {
            pipeline_.feed(run_.images.data(), run_.labels.data());
            return;
        }
        probe_->remember(position.batch, run_.images.data(), run_.labels.data());
        const bool measure = (position.steps + 1) % run_.options.fidelity_every == 0 && probe_->measurable();
        if (measure) probe_->before_tick(pipeline_.pause(), position.batch);
        pipeline_.feed(run_.images.data(), run_.labels.data());
        if (measure) {
            const auto paused = pipeline_.pause();
            const std::vector<stage_fidelity> results = probe_->after_tick();
            if (run_.record_fidelity) run_.record_fidelity(position.steps + 1, results);
        }
    }
    petra::epoch_statistics progress() { return pipeline_.progress(); }
    petra::epoch_statistics end_epoch(petra::network_parameters<net, float>&) { return pipeline_.drain(); }
    // Every stage done with the micro-batches fed: the parameters are
    // readable while the guard lives.
    auto pause() { return pipeline_.pause(); }

    template <petra::state_archive Archive>
    void transfer_state(Archive& archive)
    {
        pipeline_.transfer_state(archive);
    }

private:
    const run_context& run_;
    petra::thread_pipeline<net, cuts, petra::sgd<float>> pipeline_;
    std::unique_ptr<fidelity_probe<net, cuts>> probe_;
};

// The options a run's numbers depend on: a checkpoint resumes only under
// the same ones. Loading compares and names the first that differs.
template <petra::state_archive Archive>
void transfer_configuration(Archive& archive, const job_options& options, std::size_t batches_per_epoch)
{
    job_options saved = options;
    std::size_t seed = saved.seed;
    archive.section("job options");
    archive.text(saved.method);
    archive.text(saved.schedule);
    archive.count(saved.stages, petra::any_count);
    archive.count(saved.accumulation, petra::any_count);
    archive.count(saved.epochs, petra::any_count);
    archive.count(saved.batch, petra::any_count);
    archive.count(saved.max_steps, petra::any_count);
    archive.count(seed, petra::any_count);
    petra::transfer_flag(archive, saved.augment);
    std::array<double, 4> rates{saved.learning_rate, saved.warmup_epochs, saved.momentum, saved.weight_decay};
    archive.values(std::span<double>(rates));
    std::size_t saved_batches_per_epoch = batches_per_epoch;
    archive.count(saved_batches_per_epoch, petra::any_count);
    if constexpr (Archive::loading) {
        auto differs = [](const std::string& option, const auto& stored, const auto& asked) {
            std::ostringstream text;
            text << option << ": the checkpoint's run used " << stored << ", this command asks for " << asked
                 << "; resume with the options the run started with.";
            throw std::invalid_argument(text.str());
        };
        if (saved.method != options.method) differs("--method", saved.method, options.method);
        if (saved.method == "petra" && saved.stages != options.stages) differs("--stages", saved.stages, options.stages);
        if (saved.accumulation != options.accumulation) {
            differs("--accumulation", saved.accumulation, options.accumulation);
        }
        if (saved.epochs != options.epochs) differs("--epochs", saved.epochs, options.epochs);
        if (saved.batch != options.batch) differs("--batch", saved.batch, options.batch);
        if (saved.max_steps != options.max_steps) differs("--max-steps", saved.max_steps, options.max_steps);
        if (seed != options.seed) differs("--seed", seed, options.seed);
        if (saved.augment != options.augment) {
            differs("--augment", saved.augment ? "on" : "off", options.augment ? "on" : "off");
        }
        if (saved.schedule != options.schedule) differs("--schedule", saved.schedule, options.schedule);
        if (rates[0] != options.learning_rate) differs("--lr", rates[0], options.learning_rate);
        if (rates[1] != options.warmup_epochs) differs("--warmup", rates[1], options.warmup_epochs);
        if (rates[2] != options.momentum) differs("--momentum", rates[2], options.momentum);
        if (rates[3] != options.weight_decay) differs("--weight-decay", rates[3], options.weight_decay);
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

// FNV-1a of the parameters' and running statistics' bytes: two runs that
// end with equal digests ended with equal networks.
inline std::string parameter_digest(const petra::network_parameters<net, float>& parameters)
{
    std::uint64_t hash = 14695981039346656037ull;
    auto mix = [&](std::span<const float> values) {
        const auto* bytes = reinterpret_cast<const unsigned char*>(values.data());
        for (std::size_t i = 0; i < values.size_bytes(); ++i) {
            hash ^= bytes[i];
            hash *= 1099511628211ull;
        }
    };
    mix(parameters.values());
    mix(parameters.state());
    char text[17];
    std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(hash));
    return text;
}

// What one run does between the data and the summary, whatever the method.
struct run_hooks {
    std::function<void(const petra::epoch_statistics&)> end_epoch; // evaluates, records, reports
    std::function<void()> save;                                     // writes the checkpoint
};

// The training loop shared by all methods: from the position (a fresh run
// or a checkpoint's) to the end of the budget, or until a stop is
// requested. Saves every options.checkpoint_every micro-batches, at a stop
// and at the end when a checkpoint path is set. Returns false if stopped.
template <class Method>
bool train(run_context& run, Method& method, petra::network_parameters<net, float>& parameters,
           run_position& position, petra::progress_reporter& progress, const run_hooks& hooks)
{
    const job_options& options = run.options;
    const bool checkpoints = !options.checkpoint_path.empty();
    // An epoch begun (a checkpoint saved after its last micro-batch) is
    // always finished: drained, scored and recorded.
    for (; position.epoch < options.epochs && (position.batch > 0 || position.steps < run.total_steps);
         ++position.epoch) {
        run.order.shuffle(position.epoch);
        if (position.batch == 0) position.generator.seed(options.seed * 1000003 + position.epoch);
        for (; position.batch < run.batches_per_epoch && position.steps < run.total_steps; ++position.batch) {
            if (options.stop_requested && options.stop_requested()) {
                if (checkpoints) hooks.save();
                return false;
            }
            run.load(position.batch, position.generator);
            method.train(parameters, position);
            ++position.steps;
            if (!options.quiet) {
                const petra::epoch_statistics so_far = method.progress();
                progress.update(position.epoch + 1, options.epochs, position.steps, so_far.mean_loss(),
                                so_far.accuracy());
            }
            if (checkpoints && options.checkpoint_every != 0 && position.steps % options.checkpoint_every == 0) {
                ++position.batch; // the position saved is the next micro-batch's
                hooks.save();
                --position.batch;
            }
        }
        hooks.end_epoch(method.end_epoch(parameters));
        position.batch = 0;
    }
    if (checkpoints) hooks.save();
    return true;
}

// Loads the data, trains (from a checkpoint with options.resume),
// evaluates after every epoch, writes the metrics file and returns the
// summary; summary.interrupted if options.stop_requested stopped it (the
// checkpoint, if any, saved). Throws std::invalid_argument for bad options
// (and for a checkpoint of other options), petra::data_error for bad data,
// petra::checkpoint_error for a bad checkpoint, and whatever training
// throws (a non-finite loss names its stage).
inline job_summary run_job(const job_options& options)
{
    check(options);
    if (options.resume && options.checkpoint_path.empty()) {
        throw std::invalid_argument("--resume needs --checkpoint PATH, the checkpoint to resume.");
    }
    if (!options.resume && !options.checkpoint_path.empty() && std::filesystem::exists(options.checkpoint_path)) {
        throw std::invalid_argument("--checkpoint " + options.checkpoint_path +
                                    " exists: pass --resume to go on with it, or remove it to start afresh.");
    }
    const std::string dir = options.data_dir.empty() || options.data_dir.back() == '/' ? options.data_dir
                                                                                          : options.data_dir + "/";
    const auto train_set = petra::load_idx_dataset(dir + "train-images-idx3-ubyte.gz",
                                                   dir + "train-labels-idx1-ubyte.gz", 10,
                                                   petra::fashion_mnist_normalisation);
    const auto test = petra::load_idx_dataset(dir + "t10k-images-idx3-ubyte.gz", dir + "t10k-labels-idx1-ubyte.gz", 10,
                                              petra::fashion_mnist_normalisation);
    if (train_set.images.shape()[2] != 28 || train_set.images.shape()[3] != 28 || test.images.shape()[2] != 28 ||
        test.images.shape()[3] != 28) {
        throw petra::data_error(dir + ": the reference network takes 28 x 28 images.");
    }
    if (train_set.size() < options.batch) {
        throw std::invalid_argument("--batch " + std::to_string(options.batch) + " is larger than the " +
                                    std::to_string(train_set.size()) + " training images.");
    }

    job_summary summary;
    summary.options = options;
    run_context run(options, train_set);
    auto parameters = net::make_parameters<float>(options.seed);
    run_position position;
    petra::progress_reporter progress(run.total_steps, options.batch);
    std::unique_ptr<std::ofstream> metrics;
    auto epoch_start = std::chrono::steady_clock::now();

    auto write_metrics_row = [&](const epoch_record& record) {
        *metrics << options.method << ',' << (options.method == "petra" ? options.stages : 1) << ','
                 << options.accumulation << ',' << options.seed << ',' << record.epoch << ',' << record.steps << ','
                 << record.train_loss << ',' << record.train_accuracy << ',' << record.test_loss << ','
                 << record.test_accuracy << ',' << record.seconds << ',' << record.learning_rate << '\n';
        metrics->flush();
    };
    // The metrics file holds the finished epochs: rewritten whole when a
    // run resumes, so that nothing is lost or written twice.
    auto open_metrics = [&] {
        if (options.metrics_path.empty()) return;
        metrics = std::make_unique<std::ofstream>(options.metrics_path, std::ios::trunc);
        if (!*metrics) throw std::runtime_error(options.metrics_path + ": cannot write the metrics file.");
        *metrics << "method,stages,accumulation,seed,epoch,steps,train_loss,train_accuracy,test_loss,test_accuracy,"
                    "seconds,learning_rate\n";
        for (const epoch_record& record : position.epochs) write_metrics_row(record);
    };

    // The fidelity file, like the metrics: on resume, only the rows of
    // the steps the checkpoint covers are kept.
    std::unique_ptr<std::ofstream> fidelity;
    const char* const fidelity_header = "method,stages,accumulation,seed,epoch,step,stage,micro_batch,cosine,norm_ratio";
    auto open_fidelity = [&] {
        if (options.fidelity_every == 0) return;
        const std::string path = fidelity_path_of(options.metrics_path);
        std::vector<std::string> kept;
        if (options.resume) {
            std::ifstream old(path);
            std::string line;
            std::getline(old, line);
            while (std::getline(old, line)) {
                std::stringstream fields(line);
                std::string step; // the sixth field
                for (int i = 0; i < 6; ++i) std::getline(fields, step, ',');
                if (std::strtoull(step.c_str(), nullptr, 10) <= position.steps) kept.push_back(line);
            }
        }
        fidelity = std::make_unique<std::ofstream>(path, std::ios::trunc);
        if (!*fidelity) throw std::runtime_error(path + ": cannot write the gradient-fidelity file.");
        *fidelity << fidelity_header << '\n';
        for (const std::string& line : kept) *fidelity << line << '\n';
        fidelity->flush();
    };
    run.record_fidelity = [&](std::size_t step, const std::vector<stage_fidelity>& results) {
        for (const stage_fidelity& result : results) {
            *fidelity << options.method << ',' << options.stages << ',' << options.accumulation << ','
                      << options.seed << ',' << position.epoch + 1 << ',' << step << ',' << result.stage << ','
                      << result.micro_batch << ',' << result.cosine << ',' << result.norm_ratio << '\n';
        }
        fidelity->flush();
    };

    run_hooks hooks;
    hooks.end_epoch = [&](const petra::epoch_statistics& statistics) {
        const auto now = std::chrono::steady_clock::now();
        position.training_seconds += std::chrono::duration<double>(now - epoch_start).count();
        const auto [test_loss, test_accuracy] = evaluate(parameters, test);
        const epoch_record record{position.epoch + 1,    position.steps,
                                  statistics.mean_loss(), statistics.accuracy(),
                                  test_loss,             test_accuracy,
                                  position.training_seconds,
                                  run.schedule((position.steps + options.accumulation - 1) / options.accumulation)};
        position.epochs.push_back(record);
        if (!options.quiet) {
            char extra[96];
            std::snprintf(extra, sizeof extra, "  test loss %.4f  test accuracy %.2f%%", test_loss,
                          100.0 * test_accuracy);
            progress.epoch_done(record.epoch, options.epochs, position.steps, record.train_loss,
                                record.train_accuracy, extra);
        }
        if (metrics) write_metrics_row(record);
        epoch_start = std::chrono::steady_clock::now(); // evaluation is not training time
    };

    auto run_with = [&]<class Method>(std::type_identity<Method>) {
        Method method(run, parameters);
        auto transfer = [&](auto& archive) {
            transfer_configuration(archive, options, run.batches_per_epoch);
            transfer_position(archive, position);
            parameters.transfer_state(archive);
            method.transfer_state(archive);
        };
        hooks.save = [&] {
            // The parameters are read below: no stage may run meanwhile.
            [[maybe_unused]] const auto paused = method.pause();
            const double before = position.training_seconds;
            position.training_seconds +=
                std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_start).count();
            const auto start = std::chrono::steady_clock::now();
            petra::checkpoint_writer out(options.checkpoint_path, net::signature);
            transfer(out);
            out.commit();
            position.training_seconds = before;
            summary.checkpoint_bytes = std::filesystem::file_size(options.checkpoint_path);
            summary.checkpoint_seconds =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            if (options.checkpoint_saved) options.checkpoint_saved(position.steps);
        };
        if (options.resume) {
            petra::checkpoint_reader in(options.checkpoint_path, net::signature);
            transfer(in);
            in.finish();
            progress.resumed_at(position.steps);
            if (!options.quiet) {
                std::fprintf(stderr, "resumed from %s at epoch %zu, micro-batch %zu (step %zu of %zu)\n",
                             options.checkpoint_path.c_str(), position.epoch + 1, position.batch, position.steps,
                             run.total_steps);
            }
        }
        open_metrics();
        open_fidelity();
        epoch_start = std::chrono::steady_clock::now();
        summary.interrupted = !train(run, method, parameters, position, progress, hooks);
    };

    if (options.method == "backprop") {
        run_with(std::type_identity<sequential_method<petra::exact_backprop<net, float>>>{});
    } else if (options.method == "reversible-backprop") {
        run_with(std::type_identity<sequential_method<petra::reversible_backprop<net, float>>>{});
    } else {
        switch (options.stages) {
        case 1: run_with(std::type_identity<petra_method<1>>{}); break;
        case 2: run_with(std::type_identity<petra_method<2>>{}); break;
        case 3: run_with(std::type_identity<petra_method<3>>{}); break;
        default: run_with(std::type_identity<petra_method<4>>{}); break;
        }
    }

    summary.steps = position.steps;
    summary.position_epoch = position.epoch;
    summary.position_batch = position.batch;
    summary.epochs = position.epochs;
    summary.epochs_run = position.epochs.size();
    summary.train_seconds = position.training_seconds;
    summary.examples_per_second =
        summary.train_seconds > 0 ? double(summary.steps * options.batch) / summary.train_seconds : 0;
    summary.test_loss = summary.epochs.empty() ? 0 : summary.epochs.back().test_loss;
    summary.test_accuracy = summary.epochs.empty() ? 0 : summary.epochs.back().test_accuracy;
    summary.peak_rss_bytes = petra::peak_rss_bytes();
    summary.parameter_digest = parameter_digest(parameters);
    if (!options.summary_path.empty() && !summary.interrupted) {
        std::ofstream out(options.summary_path);
        if (!out) throw std::runtime_error(options.summary_path + ": cannot write the summary file.");
        out << summary.json() << '\n';
    }
    return summary;
}

} // namespace fashion
