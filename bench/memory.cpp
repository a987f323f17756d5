// Peak memory of training a network (batch 64), one method per process so
// that the operating system's peak resident set size (RSS) is that
// method's alone:
//   memory NETWORK exact            exact backprop (stores every activation)
//   memory NETWORK pipeline J I P   PETRA's pipeline in J stages (1, 2, 4 or
//                                   10), I = input buffer (0/1), P =
//                                   parameter buffer (0/1); PETRA is 0 0
// NETWORK is `reference` (reference_network<>) or `reversible`
// (reversible_reference_network<>, whose downsamplings are invertible), each
// cut by default_cuts<net, J> (reference_cuts<J> for the reference network,
// as every benchmark cuts it; the cost model's for the other). Both have
// 10 blocks: at J = 10 every block is its own stage.
// It trains an epoch long enough to fill every FIFO, then prints one line of
// JSON: the network, the peak RSS, the RSS before the trainer was built
// (binary, libraries, parameters, data), the bytes the trainer accounts for,
// the storage the schedule predicts (below), and the compile-time memory
// plan (memory_plan.hpp: every buffer, the parameters and each thread's
// kernel scratch; for exact backprop, its buffers, the parameters, the
// gradient and the kernel scratch of the whole network on one thread). A
// pipeline's line also holds the plan's kept inputs (its FIFOs of block
// inputs), in total and per stage. scripts/memory runs every configuration
// and prints the table of bench/RESULTS.md.
//
// Predicted storage of a pipeline, from the schedule alone: stage j keeps a
// micro-batch for 2 (J - 1 - j) ticks, so it holds 2 (J - 1 - j) + 1 copies
// of what it stores per micro-batch: the inputs of its non-reversible blocks
// (of every block with the input buffer) and, with the parameter buffer, its
// parameters. For exact backprop: every block's output (of a coupling fed
// by another block, the half it does not share with its input) and kept
// intermediates. (The plan's kept inputs differ in one respect: the last
// stage's one micro-batch of inputs counts among its working buffers.)
#include <sys/resource.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include <petra/boundary_layout.hpp>
#include <petra/memory_plan.hpp>
#include <petra/petra.hpp>
#include <petra/random.hpp>

namespace {

using reference_net = petra::reference_network<>;
using reversible_net = petra::reversible_reference_network<>;
constexpr std::size_t batch = 64;

static_assert(std::is_same_v<reference_net::input, reversible_net::input>,
              "Both networks train on the same epoch of images.");

template <class Net>
constexpr const char* network_name = std::is_same_v<Net, reference_net> ? "reference" : "reversible";

// At J = 10 every block is its own stage, for both networks.
template <class Net>
constexpr bool one_block_per_stage()
{
    constexpr auto cuts = petra::default_cuts<Net, 10>();
    for (std::size_t j = 0; j < cuts.size(); ++j) {
        if (cuts[j] != j) return false;
    }
    return true;
}
static_assert(reference_net::block_count == 10 && one_block_per_stage<reference_net>());
static_assert(reversible_net::block_count == 10 && one_block_per_stage<reversible_net>());

std::size_t peak_rss_bytes()
{
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return std::size_t(usage.ru_maxrss) * 1024;
}

struct epoch_data {
    std::vector<std::vector<float>> images;
    std::vector<std::vector<std::int32_t>> labels;

    explicit epoch_data(std::size_t count)
    {
        std::mt19937_64 generator(1);
        for (std::size_t m = 0; m < count; ++m) {
            images.emplace_back(batch * reference_net::input::size);
            labels.emplace_back(batch, std::int32_t(m % 10));
            for (float& value : images.back()) value = petra::uniform_float(generator);
        }
    }
};

template <class Net, auto Cuts>
std::size_t predicted_pipeline_bytes(bool input_buffer, bool parameter_buffer)
{
    constexpr std::size_t stages = Cuts.size() - 1;
    std::size_t values = 0;
    for (std::size_t j = 0; j < stages; ++j) {
        const std::size_t copies = 2 * (stages - 1 - j) + 1;
        for (std::size_t i = Cuts[j]; i < Cuts[j + 1]; ++i) {
            if (input_buffer || !Net::profile[i].reversible) values += copies * batch * Net::profile[i].input_values;
            if (parameter_buffer) values += copies * Net::profile[i].parameter_count;
        }
    }
    return values * sizeof(float);
}

template <class Net>
std::size_t predicted_exact_bytes()
{
    // Every block's output (boundaries 1 to block_count) as exact backprop keeps them.
    constexpr auto outputs = petra::detail::lay_out_block_boundaries<Net, 1, Net::block_count>(
        petra::detail::half_order::later_below, petra::detail::boundary_placement::every_boundary_kept);
    std::size_t values = batch * outputs.size;
    for (std::size_t i = 0; i < Net::block_count; ++i) values += Net::workspace_size(i, batch);
    return values * sizeof(float);
}

// Exact backprop on the caller's thread: its buffers, the parameters, the
// caller's gradient, and the kernel scratch of every block's forward and
// backward.
template <class Net>
std::size_t planned_exact_bytes(std::size_t trainer_bytes)
{
    petra::kernels::scratch_demand scratch;
    Net::for_each_block([&](auto index) {
        using block = typename Net::template block<index>;
        const bool input_gradient = index != 0 || !petra::input_gradient_optional<block>();
        scratch.merge(petra::forward_scratch_of<block, float>(batch));
        scratch.merge(petra::backward_scratch_of<block, float>(batch, input_gradient));
    });
    return trainer_bytes + (2 * Net::parameter_count + Net::state_count) * sizeof(float) + scratch.thread_bytes();
}

// Prints the JSON line; extra_fields (empty, or starting with ", ") go
// before its closing brace.
template <class Net>
void report(const std::string& method, std::size_t before, std::size_t accounted, std::size_t predicted,
            std::size_t planned, const std::string& extra_fields = "")
{
    std::printf("{\"network\": \"%s\", \"method\": \"%s\", \"peak_rss_bytes\": %zu, \"rss_before_trainer_bytes\": %zu, "
                "\"accounted_bytes\": %zu, \"predicted_storage_bytes\": %zu, \"planned_bytes\": %zu%s}\n",
                network_name<Net>, method.c_str(), peak_rss_bytes(), before, accounted, predicted, planned,
                extra_fields.c_str());
}

// The plan's kept inputs as JSON fields: their sum over the stages, and
// each stage's.
template <std::size_t Stages>
std::string kept_inputs_fields(const petra::pipeline_memory_plan<Stages>& plan)
{
    std::size_t total = 0;
    std::string per_stage;
    for (std::size_t j = 0; j < Stages; ++j) {
        total += plan.stage(j).kept_inputs;
        per_stage += (j == 0 ? "" : ", ") + std::to_string(plan.stage(j).kept_inputs);
    }
    return ", \"kept_inputs_bytes\": " + std::to_string(total) + ", \"kept_inputs_bytes_per_stage\": [" + per_stage +
           "]";
}

template <class Net, auto Cuts>
int run_pipeline(bool input_buffer, bool parameter_buffer)
{
    constexpr std::size_t stages = Cuts.size() - 1;
    const epoch_data data(2 * stages + 4);
    auto parameters = Net::template make_parameters<float>(1);
    const std::size_t before = peak_rss_bytes();
    const petra::pipeline_options options{
        .batch = batch, .input_buffer = input_buffer, .parameter_buffer = parameter_buffer};
    petra::thread_pipeline<Net, Cuts, petra::sgd<float>> pipeline(
        parameters, petra::sgd_options{}, [](std::size_t) { return 0.01; }, options);
    for (std::size_t m = 0; m < data.images.size(); ++m) pipeline.feed(data.images[m].data(), data.labels[m].data());
    pipeline.drain();
    const auto plan = petra::memory_plan<Net, Cuts>(options);
    report<Net>("pipeline J=" + std::to_string(stages) + " input_buffer=" + std::to_string(input_buffer) +
                    " parameter_buffer=" + std::to_string(parameter_buffer),
                before, pipeline.memory_bytes(), predicted_pipeline_bytes<Net, Cuts>(input_buffer, parameter_buffer),
                plan.total_bytes(), kept_inputs_fields(plan));
    return 0;
}

template <class Net>
int run_exact()
{
    const epoch_data data(4);
    auto parameters = Net::template make_parameters<float>(1);
    const std::size_t before = peak_rss_bytes();
    petra::exact_backprop<Net, float> trainer(batch);
    std::vector<float> gradient(Net::parameter_count);
    for (std::size_t m = 0; m < data.images.size(); ++m) {
        trainer.accumulate_gradient(parameters, batch, data.images[m].data(), data.labels[m].data(), gradient);
    }
    report<Net>("exact backprop", before, trainer.memory_bytes(), predicted_exact_bytes<Net>(),
                planned_exact_bytes<Net>(trainer.memory_bytes()));
    return 0;
}

// The command line, checked (see the top of the file).
struct arguments {
    std::string network;
    bool exact = false;
    std::size_t stages = 0;
    bool input_buffer = false;
    bool parameter_buffer = false;
};

const char* const usage = "usage: %s reference|reversible exact\n"
                          "       %s reference|reversible pipeline J input_buffer parameter_buffer\n"
                          "  J: 1, 2, 4 or 10 stages; input_buffer, parameter_buffer: 0 or 1\n";

// Whether text is "0" or "1"; value gets which.
bool parse_flag(const std::string& text, bool& value)
{
    if (text != "0" && text != "1") return false;
    value = text == "1";
    return true;
}

// The arguments, or an empty network name after printing why they are
// wrong; with -h or --help, prints the usage and exits with 0.
arguments parse(int argc, char** argv)
{
    arguments parsed;
    const auto refuse = [&](const std::string& reason) {
        std::fprintf(stderr, "%s: %s\n", argv[0], reason.c_str());
        std::fprintf(stderr, usage, argv[0], argv[0]);
        return arguments{};
    };
    if (argc == 2 && (std::string(argv[1]) == "-h" || std::string(argv[1]) == "--help")) {
        std::printf(usage, argv[0], argv[0]);
        std::exit(0);
    }
    if (argc < 3) return refuse("a network and a method are needed");
    parsed.network = argv[1];
    if (parsed.network != "reference" && parsed.network != "reversible") {
        return refuse("the network must be 'reference' or 'reversible', not '" + parsed.network + "'");
    }
    const std::string method = argv[2];
    if (method == "exact") {
        if (argc != 3) return refuse("exact takes no further arguments");
        parsed.exact = true;
        return parsed;
    }
    if (method != "pipeline") return refuse("the method must be 'exact' or 'pipeline', not '" + method + "'");
    if (argc != 6) return refuse("pipeline takes J, input_buffer and parameter_buffer");
    const std::string stages = argv[3];
    if (stages == "1" || stages == "2" || stages == "4" || stages == "10") {
        parsed.stages = std::stoul(stages);
    } else {
        return refuse("J must be 1, 2, 4 or 10, not '" + stages + "'");
    }
    if (!parse_flag(argv[4], parsed.input_buffer)) {
        return refuse(std::string("input_buffer must be 0 or 1, not '") + argv[4] + "'");
    }
    if (!parse_flag(argv[5], parsed.parameter_buffer)) {
        return refuse(std::string("parameter_buffer must be 0 or 1, not '") + argv[5] + "'");
    }
    return parsed;
}

template <class Net>
int run(const arguments& args)
{
    if (args.exact) return run_exact<Net>();
    switch (args.stages) {
    case 1: return run_pipeline<Net, petra::default_cuts<Net, 1>()>(args.input_buffer, args.parameter_buffer);
    case 2: return run_pipeline<Net, petra::default_cuts<Net, 2>()>(args.input_buffer, args.parameter_buffer);
    case 4: return run_pipeline<Net, petra::default_cuts<Net, 4>()>(args.input_buffer, args.parameter_buffer);
    case 10: return run_pipeline<Net, petra::default_cuts<Net, 10>()>(args.input_buffer, args.parameter_buffer);
    }
    return 2; // parse admits no other J
}

} // namespace

int main(int argc, char** argv)
{
    const arguments args = parse(argc, argv);
    if (args.network.empty()) return 2;
    return args.network == "reference" ? run<reference_net>(args) : run<reversible_net>(args);
}
