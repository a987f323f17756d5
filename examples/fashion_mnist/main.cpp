// The main job: train the reference network on Fashion-MNIST with PETRA,
// exact backprop or reversible backprop, and report test accuracy, time,
// throughput and memory. Run with --help for the options.
#include <signal.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>

#include "job.hpp"

namespace {

const char* const usage = R"(usage: fashion_mnist [options]

Trains the reference network (petra::reference_network<>, 222,058 parameters)
on Fashion-MNIST and scores it on the 10,000 test images.

  --method M          petra | backprop | reversible-backprop      (petra)
  --stages J          PETRA's stages, one thread each: 1 to 4      (4)
  --accumulation K    micro-batches per optimizer step             (1)
  --epochs N          epochs over the 60,000 training images       (2)
  --batch B           examples per micro-batch                     (64)
  --lr R              peak learning rate, after the warm-up        (0.05)
  --warmup E          warm-up length in epochs (linear)            (0.5)
  --schedule S        cosine | step | constant, after the warm-up  (cosine)
  --momentum M        Nesterov momentum                            (0.9)
  --weight-decay W    on convolution and dense weights only        (5e-4)
  --augment           random crops (padding 2) and flips
  --seed S            initial parameters, data order, augmentation (1)
  --data-dir D        IDX files (gzip)  (/usr/share/datasets/fashion-mnist)
  --metrics PATH      CSV, one row per epoch
  --summary PATH      the JSON summary line, also written to PATH
  --max-steps N       stop after N micro-batches (quick runs; the
                      schedule is compressed into them)
  --checkpoint PATH   save the whole training state to PATH every
                      --checkpoint-every micro-batches (500), at the end,
                      and on SIGINT or SIGTERM (the current tick finishes,
                      the state is saved, the job exits with 130 or 143)
  --checkpoint-every N  0: only at the end and on a signal
  --resume            go on from --checkpoint PATH; the other options must
                      be those the run started with (paths aside)
  --fidelity-every N  PETRA: every N micro-batches, compare the gradient
                      each stage computes with the true (backprop) gradient
                      at the same parameters; cosine and norm ratio per
                      stage go to <metrics>-fidelity.csv (needs --metrics)
  --quiet             no progress on stderr
  --help              this text

Progress goes to stderr (a bar on a terminal, plain lines otherwise). At the
end, a short report on stderr and one line of JSON on stdout with method,
stages, accumulation, epochs, steps, seed, test_accuracy, train_seconds,
examples_per_second, peak_rss_bytes and parameter_digest (equal digests:
equal final networks).

Exit status: 0 done; 2 bad options (or a resume under other options); 3
bad data; 1 any other failure (a diverging loss, a bad checkpoint); 130 or
143 stopped by SIGINT or SIGTERM with the checkpoint saved.
)";

struct usage_error : std::invalid_argument {
    using std::invalid_argument::invalid_argument;
};

fashion::job_options parse(int argc, char** argv, bool& help)
{
    fashion::job_options options;
    for (int i = 1; i < argc; ++i) {
        const std::string name = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) throw usage_error(name + " needs a value.");
            return argv[++i];
        };
        auto number = [&](const std::string& text) -> double {
            std::size_t used = 0;
            double parsed = 0;
            try {
                parsed = std::stod(text, &used);
            } catch (const std::exception&) {
                used = 0;
            }
            if (used != text.size() || text.empty()) throw usage_error(name + " needs a number, not '" + text + "'.");
            return parsed;
        };
        auto count = [&](const std::string& text) -> std::size_t {
            std::size_t used = 0;
            unsigned long long parsed = 0;
            try {
                parsed = std::stoull(text, &used);
            } catch (const std::exception&) {
                used = 0;
            }
            if (text.empty() || used != text.size() || text[0] == '-') {
                throw usage_error(name + " needs a whole number, not '" + text + "'.");
            }
            return std::size_t(parsed);
        };
        if (name == "--help" || name == "-h") help = true;
        else if (name == "--method") options.method = value();
        else if (name == "--stages") options.stages = count(value());
        else if (name == "--accumulation") options.accumulation = count(value());
        else if (name == "--epochs") options.epochs = count(value());
        else if (name == "--batch") options.batch = count(value());
        else if (name == "--lr") options.learning_rate = number(value());
        else if (name == "--warmup") options.warmup_epochs = number(value());
        else if (name == "--schedule") options.schedule = value();
        else if (name == "--momentum") options.momentum = number(value());
        else if (name == "--weight-decay") options.weight_decay = number(value());
        else if (name == "--augment") options.augment = true;
        else if (name == "--seed") options.seed = count(value());
        else if (name == "--data-dir") options.data_dir = value();
        else if (name == "--metrics") options.metrics_path = value();
        else if (name == "--summary") options.summary_path = value();
        else if (name == "--max-steps") options.max_steps = count(value());
        else if (name == "--checkpoint") options.checkpoint_path = value();
        else if (name == "--checkpoint-every") options.checkpoint_every = count(value());
        else if (name == "--resume") options.resume = true;
        else if (name == "--fidelity-every") options.fidelity_every = count(value());
        else if (name == "--quiet") options.quiet = true;
        else throw usage_error("unknown option '" + name + "' (see --help).");
    }
    return options;
}

// The signal that asked the job to stop, 0 if none; it may arrive on any
// thread, hence a lock-free atomic. A second signal of either kind ends the
// process at once (the handler resets itself).
std::atomic<int> stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);

extern "C" void request_stop(int signal) { stop_signal.store(signal); }

void install_stop_handlers()
{
    struct sigaction action{};
    action.sa_handler = request_stop;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESETHAND | SA_RESTART; // writes in progress are not cut short
    sigaction(SIGINT, &action, nullptr);
    sigaction(SIGTERM, &action, nullptr);
}

} // namespace

int main(int argc, char** argv)
{
    bool help = false;
    fashion::job_options options;
    try {
        options = parse(argc, argv, help);
        if (help) {
            std::fputs(usage, stdout);
            return 0;
        }
        fashion::check(options);
    } catch (const std::invalid_argument& error) {
        std::fprintf(stderr, "fashion_mnist: %s\n", error.what());
        return 2;
    }
    // Without a checkpoint there is nothing to save: a signal ends the job
    // as it ends any program.
    if (!options.checkpoint_path.empty()) {
        install_stop_handlers();
        options.stop_requested = [] { return stop_signal.load() != 0; };
    }
    try {
        const fashion::job_summary summary = fashion::run_job(options);
        if (summary.interrupted) {
            std::fprintf(stderr,
                         "\nfashion_mnist: stopped by %s at epoch %zu, micro-batch %zu (step %zu); checkpoint saved "
                         "to %s (%.1f MiB in %.2f s). Resume with the same options and --resume.\n",
                         stop_signal.load() == SIGTERM ? "SIGTERM" : "SIGINT", summary.position_epoch + 1,
                         summary.position_batch, summary.steps, options.checkpoint_path.c_str(),
                         double(summary.checkpoint_bytes) / (1 << 20), summary.checkpoint_seconds);
            return 128 + (stop_signal.load() == SIGTERM ? SIGTERM : SIGINT);
        }
        std::fprintf(stderr,
                     "%s%s: test accuracy %.2f%% after %zu epochs (%zu steps), %.1f s of training, %.0f examples/s, "
                     "peak memory %.0f MiB\n",
                     options.method.c_str(),
                     options.method == "petra" ? (" (" + std::to_string(options.stages) + " stages)").c_str() : "",
                     100.0 * summary.test_accuracy, summary.epochs_run, summary.steps, summary.train_seconds,
                     summary.examples_per_second, double(summary.peak_rss_bytes) / (1 << 20));
        std::printf("%s\n", summary.json().c_str());
        return 0;
    } catch (const std::invalid_argument& error) { // options, or a checkpoint of other options
        std::fprintf(stderr, "fashion_mnist: %s\n", error.what());
        return 2;
    } catch (const petra::data_error& error) {
        std::fprintf(stderr, "fashion_mnist: %s\n", error.what());
        return 3;
    } catch (const std::exception& error) {
        std::fprintf(stderr, "fashion_mnist: %s\n", error.what());
        return 1;
    }
}
