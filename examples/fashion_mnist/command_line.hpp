// The job's command line: every field of job_options as an option, and the
// help text (--help), which also states what the job prints and its exit
// statuses. Checking the values is checked_recipe's job (options.hpp);
// here only their form: a number, a whole number.
#pragma once

#include <array>
#include <cstddef>
#include <exception>
#include <string>

#include <CLI/CLI.hpp>

#include "model.hpp"
#include "options.hpp"

namespace fashion {

// The exit statuses --help documents; a stop by a signal exits with 128 +
// its number (130 for SIGINT, 143 for SIGTERM).
namespace exit_status {
inline constexpr int done = 0;
inline constexpr int failure = 1;
inline constexpr int usage = 2;
inline constexpr int bad_data = 3;
} // namespace exit_status

// The whole text must be a number in the form "--lr 0.05" takes.
inline std::string number_form_error(std::string& text)
{
    std::size_t used = 0;
    try {
        std::stod(text, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    return !text.empty() && used == text.size() ? "" : "needs a number, not '" + text + "'";
}

// A whole number, not negative: without this check a conversion to an
// unsigned count would take "-1" for the largest count.
inline std::string whole_number_form_error(std::string& text)
{
    std::size_t used = 0;
    try {
        std::stoull(text, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    return !text.empty() && used == text.size() && text[0] != '-' ? "" : "needs a whole number, not '" + text + "'";
}

// "222058" -> "222,058"
inline std::string with_thousands(std::size_t value)
{
    std::string digits = std::to_string(value);
    for (std::size_t at = digits.size(); at > 3; at -= 3) digits.insert(at - 3, ",");
    return digits;
}

template <class Choice, std::size_t N>
std::string alternatives(const std::array<named<Choice>, N>& names)
{
    std::string text;
    for (const named<Choice>& entry : names) text += (text.empty() ? "" : " | ") + std::string(entry.name);
    return text;
}

inline const char* const job_epilogue = R"(Progress goes to stderr (a bar on a terminal, plain lines otherwise). At the
end, a short report on stderr and one line of JSON on stdout with network,
method, stages, cuts (the first block of each stage, then the block count),
driver, ranks, replicas, accumulation, epochs, steps, batch, seed, learning_rate,
warmup_epochs, delay_rate_exponent, test_accuracy, test_loss, train_seconds,
examples_per_second, peak_rss_bytes, cache_sizes (those the kernels blocked for;
the values do not depend on them) and
parameter_digest (a digest of the final parameters and running statistics:
equal digests, equal final networks).

Exit status: 0 done; 2 bad options (or a resume under other options); 3
bad data; 1 any other failure (a diverging loss, a bad checkpoint); 130 or
143 stopped by SIGINT or SIGTERM with the checkpoint saved.)";

// Declares every option on app, each written into options when parsed. A
// later occurrence of an option overrides an earlier one (scripts/train
// passes its defaults first).
inline void declare_options(CLI::App& app, job_options& options)
{
    app.description("Trains the reference network (petra::reference_network<>, " +
                    with_thousands(reference_net::parameter_count) +
                    " parameters)\nor its reversible variant (petra::reversible_reference_network<>, " +
                    with_thousands(reversible_net::parameter_count) +
                    "\nparameters) on Fashion-MNIST and scores it on the 10,000 test images.\n");
    app.footer(job_epilogue);
    app.set_help_flag("-h,--help", "this text");
    app.get_formatter()->column_width(26);
    app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)->always_capture_default();
    const CLI::Validator number(number_form_error, "");
    const CLI::Validator whole_number(whole_number_form_error, "");

    app.add_option("--network", options.network,
                   alternatives(network_names) +
                       ": the reference network, or\nits variant whose downsamplings are "
                       "reversible\n(pixel unshuffle), so that PETRA keeps no input\nbetween stem and head")
        ->type_name("N");
    app.add_option("--method", options.method, alternatives(method_names))->type_name("M");
    app.add_option("--stages", options.stages,
                   "PETRA's stages: 1 to " + std::to_string(max_stages) + ", the\nnetwork's blocks")
        ->type_name("J")
        ->check(whole_number);
    app.add_option("--driver", options.driver,
                   alternatives(driver_names) + ": PETRA's stages on one\nthread each, on the caller's thread, or on "
                                                "MPI ranks\n(mpirun -np R, R <= J; the same numbers)")
        ->type_name("D");
    app.add_option("--replicas", options.replicas,
                   "PETRA's pipeline in D copies (--driver simulator or\nmpi: mpirun -np D x R), each on its "
                   "shard of a\nmicro-batch of D x batch examples")
        ->type_name("D")
        ->check(whole_number);
    app.add_option("--accumulation", options.accumulation, "micro-batches per optimizer step")
        ->type_name("K")
        ->check(whole_number);
    app.add_option("--epochs", options.epochs, "epochs over the 60,000 training images")
        ->type_name("N")
        ->check(whole_number);
    app.add_option("--batch", options.batch, "examples per micro-batch")->type_name("B")->check(whole_number);
    app.add_option("--lr", options.learning_rate, "peak learning rate, after the warm-up")
        ->type_name("R")
        ->check(number);
    app.add_option("--warmup", options.warmup_epochs, "warm-up length in epochs (linear)")
        ->type_name("E")
        ->check(number);
    app.add_option("--delay-rate-exponent", options.delay_rate_exponent,
                   "PETRA: stage j's rate / (1 + its delay in steps)^P;\n0: the same rate for every stage")
        ->type_name("P")
        ->check(number);
    app.add_option("--schedule", options.schedule, alternatives(schedule_names) + ", after the warm-up")
        ->type_name("S");
    app.add_option(
           "--precision", options.precision,
           "fp32 | bf16: the training steps' products (bf16:\nAMX or AVX512-BF16; float parameters, optimizer\nand evaluation)")
        ->type_name("P");
    app.add_option("--momentum", options.momentum, "Nesterov momentum")->type_name("M")->check(number);
    app.add_option("--weight-decay", options.weight_decay, "on convolution and dense weights only")
        ->type_name("W")
        ->check(number);
    app.add_flag("--augment", options.augment, "random crops (padding 2) and flips");
    app.add_option("--seed", options.seed, "initial parameters, data order, augmentation")
        ->type_name("S")
        ->check(whole_number);
    app.add_option("--data-dir", options.data_dir, "IDX files (gzip)")->type_name("D");
    app.add_option("--metrics", options.metrics_path, "CSV, one row per epoch")->type_name("PATH");
    app.add_option("--summary", options.summary_path, "the JSON summary line, also written to PATH")->type_name("PATH");
    app.add_option("--max-steps", options.max_steps,
                   "stop after N micro-batches (quick runs; the schedule\nis compressed into them); 0: no cap")
        ->type_name("N")
        ->check(whole_number);
    app.add_option("--checkpoint", options.checkpoint_path,
                   "save the whole training state to PATH every\n--checkpoint-every micro-batches, at the end, and "
                   "on\nSIGINT or SIGTERM (the current tick finishes, the\nstate is saved, the job exits with 130 or "
                   "143)")
        ->type_name("PATH");
    app.add_option("--checkpoint-every", options.checkpoint_every, "0: only at the end and on a signal")
        ->type_name("N")
        ->check(whole_number);
    app.add_flag("--resume", options.resume,
                 "go on from --checkpoint PATH; the other options must\nbe those the run started with (paths aside)");
    app.add_option("--init-weights", options.init_weights_path,
                   "start from the weights in the .npz file PATH (named\nas petra names them; e.g. converted from "
                   "PyTorch by\nscripts/torch_weights) instead of the seed's")
        ->type_name("PATH");
    app.add_option("--save-weights", options.save_weights_path, "at the end, write the weights to the .npz file PATH")
        ->type_name("PATH");
    app.add_option("--export-onnx", options.onnx_path, "at the end, write the inference graph to PATH (ONNX)")
        ->type_name("PATH");
    app.add_option("--fidelity-every", options.fidelity_every,
                   "PETRA: every N micro-batches, compare the gradient\neach stage computes with the true (backprop) "
                   "gradient\nat the same parameters; cosine and norm ratio per\nstage go to <metrics>-fidelity.csv "
                   "(needs --metrics)")
        ->type_name("N")
        ->check(whole_number);
    app.add_flag("--quiet", options.quiet, "no progress on stderr");
}

} // namespace fashion
