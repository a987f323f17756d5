// The Fashion-MNIST job: the reference network trained with PETRA (J stages
// on J threads), exact backprop or reversible backprop, from the same data,
// seed, optimizer and schedule, then scored on the test set. The command-line
// front end is main.cpp; tests call run_job directly on generated data.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <petra/petra.hpp>
#include <petra/train/progress.hpp>

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
};

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

    std::string json() const
    {
        char text[768];
        std::snprintf(text, sizeof text,
                      "{\"method\": \"%s\", \"stages\": %zu, \"accumulation\": %zu, \"epochs\": %zu, \"steps\": %zu, "
                      "\"batch\": %zu, \"seed\": %llu, \"learning_rate\": %g, \"test_accuracy\": %.4f, "
                      "\"test_loss\": %.4f, \"train_seconds\": %.1f, \"examples_per_second\": %.1f, "
                      "\"peak_rss_bytes\": %zu}",
                      options.method.c_str(), options.method == "petra" ? options.stages : 1, options.accumulation,
                      epochs_run, steps, options.batch, static_cast<unsigned long long>(options.seed),
                      options.learning_rate, test_accuracy, test_loss, train_seconds, examples_per_second,
                      peak_rss_bytes);
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

// Exact or reversible backprop with SGD on the caller's thread.
template <class Trainer>
void train_sequentially(run_context& run, petra::network_parameters<net, float>& parameters, job_summary& summary,
                        petra::progress_reporter& progress, const std::function<void(std::size_t, double, double)>& end_epoch)
{
    const job_options& options = run.options;
    Trainer trainer(options.batch);
    petra::sgd<float> optimizer({.momentum = options.momentum, .nesterov = true, .weight_decay = options.weight_decay},
                                net::weight_mask<float>());
    std::vector<float> gradient(net::parameter_count, 0.0f);
    std::size_t pending = 0, optimizer_steps = 0;
    for (std::size_t epoch = 0; epoch < options.epochs && summary.steps < run.total_steps; ++epoch) {
        run.order.shuffle(epoch);
        std::mt19937_64 generator(options.seed * 1000003 + epoch);
        double loss_sum = 0;
        std::size_t correct = 0, seen = 0;
        for (std::size_t b = 0; b < run.batches_per_epoch && summary.steps < run.total_steps; ++b) {
            run.load(b, generator);
            const float loss = trainer.accumulate_gradient(parameters, options.batch, run.images.data(),
                                                           run.labels.data(), gradient);
            if (!std::isfinite(loss)) {
                throw std::runtime_error("the loss of micro-batch " + std::to_string(b) + " of epoch " +
                                         std::to_string(epoch + 1) + " is not finite (" + std::to_string(loss) +
                                         "): training diverged.");
            }
            loss_sum += loss;
            correct += classifier_loss::correct(options.batch, trainer.logits().data(), run.labels.data());
            seen += 1;
            if (++pending == options.accumulation) {
                optimizer.step(parameters.values(), gradient, pending, run.schedule(optimizer_steps++));
                std::fill(gradient.begin(), gradient.end(), 0.0f);
                pending = 0;
            }
            ++summary.steps;
            if (!options.quiet) {
                progress.update(epoch + 1, options.epochs, summary.steps, loss_sum / double(seen),
                                double(correct) / double(seen * options.batch));
            }
        }
        if (pending > 0) { // the epoch's last partial accumulation
            optimizer.step(parameters.values(), gradient, pending, run.schedule(optimizer_steps++));
            std::fill(gradient.begin(), gradient.end(), 0.0f);
            pending = 0;
        }
        end_epoch(epoch, loss_sum / double(seen), double(correct) / double(seen * options.batch));
    }
}

// PETRA: J stages on J threads.
template <std::size_t Stages>
void train_with_petra(run_context& run, petra::network_parameters<net, float>& parameters, job_summary& summary,
                      petra::progress_reporter& progress, const std::function<void(std::size_t, double, double)>& end_epoch)
{
    const job_options& options = run.options;
    constexpr auto cuts = petra::partition<net, Stages>();
    petra::thread_pipeline<net, cuts, petra::sgd<float>> pipeline(
        parameters, {.momentum = options.momentum, .nesterov = true, .weight_decay = options.weight_decay},
        run.schedule, {.batch = options.batch, .accumulation = options.accumulation});
    for (std::size_t epoch = 0; epoch < options.epochs && summary.steps < run.total_steps; ++epoch) {
        run.order.shuffle(epoch);
        std::mt19937_64 generator(options.seed * 1000003 + epoch);
        for (std::size_t b = 0; b < run.batches_per_epoch && summary.steps < run.total_steps; ++b) {
            run.load(b, generator);
            pipeline.feed(run.images.data(), run.labels.data());
            ++summary.steps;
            if (!options.quiet) {
                const petra::epoch_statistics so_far = pipeline.progress();
                progress.update(epoch + 1, options.epochs, summary.steps, so_far.mean_loss(), so_far.accuracy());
            }
        }
        const petra::epoch_statistics statistics = pipeline.drain();
        end_epoch(epoch, statistics.mean_loss(), statistics.accuracy());
    }
}

// Loads the data, trains, evaluates after every epoch, writes the metrics
// file and returns the summary. Throws std::invalid_argument for bad
// options, petra::data_error for bad data, and whatever training throws
// (a non-finite loss names its stage).
inline job_summary run_job(const job_options& options)
{
    check(options);
    const std::string dir = options.data_dir.empty() || options.data_dir.back() == '/' ? options.data_dir
                                                                                          : options.data_dir + "/";
    const auto train = petra::load_idx_dataset(dir + "train-images-idx3-ubyte.gz", dir + "train-labels-idx1-ubyte.gz",
                                               10, petra::fashion_mnist_normalisation);
    const auto test = petra::load_idx_dataset(dir + "t10k-images-idx3-ubyte.gz", dir + "t10k-labels-idx1-ubyte.gz", 10,
                                              petra::fashion_mnist_normalisation);
    if (train.images.shape()[2] != 28 || train.images.shape()[3] != 28 || test.images.shape()[2] != 28 ||
        test.images.shape()[3] != 28) {
        throw petra::data_error(dir + ": the reference network takes 28 x 28 images.");
    }
    if (train.size() < options.batch) {
        throw std::invalid_argument("--batch " + std::to_string(options.batch) + " is larger than the " +
                                    std::to_string(train.size()) + " training images.");
    }

    std::unique_ptr<std::ofstream> metrics;
    if (!options.metrics_path.empty()) {
        metrics = std::make_unique<std::ofstream>(options.metrics_path);
        if (!*metrics) throw std::runtime_error(options.metrics_path + ": cannot write the metrics file.");
        *metrics << "method,stages,accumulation,seed,epoch,steps,train_loss,train_accuracy,test_loss,test_accuracy,"
                    "seconds,learning_rate\n";
    }

    job_summary summary;
    summary.options = options;
    run_context run(options, train);
    auto parameters = net::make_parameters<float>(options.seed);
    petra::progress_reporter progress(run.total_steps, options.batch);
    double training_seconds = 0;
    auto epoch_start = std::chrono::steady_clock::now();
    auto end_epoch = [&](std::size_t epoch, double train_loss, double train_accuracy) {
        const auto now = std::chrono::steady_clock::now();
        training_seconds += std::chrono::duration<double>(now - epoch_start).count();
        const auto [test_loss, test_accuracy] = evaluate(parameters, test);
        epoch_record record{epoch + 1, summary.steps, train_loss, train_accuracy, test_loss, test_accuracy,
                            training_seconds,
                            run.schedule((summary.steps + options.accumulation - 1) / options.accumulation)};
        summary.epochs.push_back(record);
        summary.epochs_run = epoch + 1;
        if (!options.quiet) {
            char extra[96];
            std::snprintf(extra, sizeof extra, "  test loss %.4f  test accuracy %.2f%%", test_loss,
                          100.0 * test_accuracy);
            progress.epoch_done(epoch + 1, options.epochs, summary.steps, train_loss, train_accuracy, extra);
        }
        if (metrics) {
            *metrics << options.method << ',' << (options.method == "petra" ? options.stages : 1) << ','
                     << options.accumulation << ',' << options.seed << ',' << record.epoch << ',' << record.steps
                     << ',' << record.train_loss << ',' << record.train_accuracy << ',' << record.test_loss << ','
                     << record.test_accuracy << ',' << record.seconds << ',' << record.learning_rate << '\n';
            metrics->flush();
        }
        epoch_start = std::chrono::steady_clock::now(); // evaluation is not training time
    };

    if (options.method == "backprop") {
        train_sequentially<petra::exact_backprop<net, float>>(run, parameters, summary, progress, end_epoch);
    } else if (options.method == "reversible-backprop") {
        train_sequentially<petra::reversible_backprop<net, float>>(run, parameters, summary, progress, end_epoch);
    } else {
        switch (options.stages) {
        case 1: train_with_petra<1>(run, parameters, summary, progress, end_epoch); break;
        case 2: train_with_petra<2>(run, parameters, summary, progress, end_epoch); break;
        case 3: train_with_petra<3>(run, parameters, summary, progress, end_epoch); break;
        default: train_with_petra<4>(run, parameters, summary, progress, end_epoch); break;
        }
    }

    summary.train_seconds = training_seconds;
    summary.examples_per_second = training_seconds > 0 ? double(summary.steps * options.batch) / training_seconds : 0;
    summary.test_loss = summary.epochs.empty() ? 0 : summary.epochs.back().test_loss;
    summary.test_accuracy = summary.epochs.empty() ? 0 : summary.epochs.back().test_accuracy;
    summary.peak_rss_bytes = petra::peak_rss_bytes();
    if (!options.summary_path.empty()) {
        std::ofstream out(options.summary_path);
        if (!out) throw std::runtime_error(options.summary_path + ": cannot write the summary file.");
        out << summary.json() << '\n';
    }
    return summary;
}

} // namespace fashion
