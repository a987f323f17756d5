// Peak memory of training the reference network (batch 64), one method per
// process so that the operating system's peak resident set size (RSS) is
// that method's alone:
//   memory exact            exact backprop (stores every activation)
//   memory pipeline J I P   PETRA's pipeline in J stages, I = input buffer
//                           (0/1), P = parameter buffer (0/1); PETRA is 0 0
// It trains an epoch long enough to fill every FIFO, then prints one line of
// JSON: the peak RSS, the RSS before the trainer was built (binary,
// libraries, parameters, data), the bytes the trainer accounts for, the
// storage the schedule predicts (below), and the compile-time memory plan
// (memory_plan.hpp: every buffer, the parameters and each thread's kernel
// scratch; for exact backprop, its buffers, the parameters, the gradient
// and the kernel scratch of the whole network on one thread). scripts/memory
// runs every configuration and prints the table of bench/RESULTS.md.
//
// Predicted storage of a pipeline, from the schedule alone: stage j keeps a
// micro-batch for 2 (J - 1 - j) ticks, so it holds 2 (J - 1 - j) + 1 copies
// of what it stores per micro-batch: the inputs of its non-reversible blocks
// (of every block with the input buffer) and, with the parameter buffer, its
// parameters. For exact backprop: every block's output and kept
// intermediates.
#include <sys/resource.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <petra/memory_plan.hpp>
#include <petra/petra.hpp>

namespace {

using net = petra::reference_network<>;
constexpr std::size_t batch = 64;

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
        std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
        for (std::size_t m = 0; m < count; ++m) {
            images.emplace_back(batch * net::input::size);
            labels.emplace_back(batch, std::int32_t(m % 10));
            for (float& value : images.back()) value = pixel(generator);
        }
    }
};

template <std::size_t Stages>
std::size_t predicted_pipeline_bytes(bool input_buffer, bool parameter_buffer)
{
    constexpr auto cuts = petra::reference_cuts<Stages>();
    std::size_t values = 0;
    for (std::size_t j = 0; j < Stages; ++j) {
        const std::size_t copies = 2 * (Stages - 1 - j) + 1;
        for (std::size_t i = cuts[j]; i < cuts[j + 1]; ++i) {
            if (input_buffer || !net::profile[i].reversible) values += copies * batch * net::profile[i].input_values;
            if (parameter_buffer) values += copies * net::profile[i].parameter_count;
        }
    }
    return values * sizeof(float);
}

std::size_t predicted_exact_bytes()
{
    std::size_t values = 0;
    for (std::size_t i = 0; i < net::block_count; ++i) {
        values += batch * net::profile[i].output_values + net::workspace_size(i, batch);
    }
    return values * sizeof(float);
}

// Exact backprop on the caller's thread: its buffers, the parameters, the
// caller's gradient, and the kernel scratch of every block's forward and
// backward.
std::size_t planned_exact_bytes(std::size_t trainer_bytes)
{
    petra::kernels::scratch_demand scratch;
    net::for_each_block([&](auto index) {
        using block = net::block<index>;
        const bool input_gradient = index != 0 || !petra::input_gradient_optional<block>();
        scratch.merge(petra::forward_scratch_of<block, float>(batch));
        scratch.merge(petra::backward_scratch_of<block, float>(batch, input_gradient));
    });
    return trainer_bytes + (2 * net::parameter_count + net::state_count) * sizeof(float) + scratch.thread_bytes();
}

void report(const std::string& method, std::size_t before, std::size_t accounted, std::size_t predicted,
            std::size_t planned)
{
    std::printf("{\"method\": \"%s\", \"peak_rss_bytes\": %zu, \"rss_before_trainer_bytes\": %zu, "
                "\"accounted_bytes\": %zu, \"predicted_storage_bytes\": %zu, \"planned_bytes\": %zu}\n",
                method.c_str(), peak_rss_bytes(), before, accounted, predicted, planned);
}

template <std::size_t Stages>
int run_pipeline(bool input_buffer, bool parameter_buffer)
{
    const epoch_data data(2 * Stages + 4);
    auto parameters = net::make_parameters<float>(1);
    const std::size_t before = peak_rss_bytes();
    constexpr auto cuts = petra::reference_cuts<Stages>();
    const petra::pipeline_options options{
        .batch = batch, .input_buffer = input_buffer, .parameter_buffer = parameter_buffer};
    petra::thread_pipeline<net, cuts, petra::sgd<float>> pipeline(parameters, petra::sgd_options{},
                                                                  [](std::size_t) { return 0.01; }, options);
    for (std::size_t m = 0; m < data.images.size(); ++m) pipeline.feed(data.images[m].data(), data.labels[m].data());
    pipeline.drain();
    report("pipeline J=" + std::to_string(Stages) + " input_buffer=" + std::to_string(input_buffer) +
               " parameter_buffer=" + std::to_string(parameter_buffer),
           before, pipeline.memory_bytes(), predicted_pipeline_bytes<Stages>(input_buffer, parameter_buffer),
           petra::memory_plan<net, cuts>(options).total_bytes());
    return 0;
}

int run_exact()
{
    const epoch_data data(4);
    auto parameters = net::make_parameters<float>(1);
    const std::size_t before = peak_rss_bytes();
    petra::exact_backprop<net, float> trainer(batch);
    std::vector<float> gradient(net::parameter_count);
    for (std::size_t m = 0; m < data.images.size(); ++m) {
        trainer.accumulate_gradient(parameters, batch, data.images[m].data(), data.labels[m].data(), gradient);
    }
    report("exact backprop", before, trainer.memory_bytes(), predicted_exact_bytes(),
           planned_exact_bytes(trainer.memory_bytes()));
    return 0;
}

} // namespace

int main(int argc, char** argv)
{
    const std::string method = argc > 1 ? argv[1] : "";
    if (method == "exact") return run_exact();
    if (method == "pipeline" && argc == 5) {
        const int stages = std::atoi(argv[2]);
        const bool input_buffer = std::atoi(argv[3]) != 0, parameter_buffer = std::atoi(argv[4]) != 0;
        if (stages == 1) return run_pipeline<1>(input_buffer, parameter_buffer);
        if (stages == 2) return run_pipeline<2>(input_buffer, parameter_buffer);
        if (stages == 4) return run_pipeline<4>(input_buffer, parameter_buffer);
    }
    std::fprintf(stderr, "usage: %s exact | pipeline J(1, 2 or 4) input_buffer(0/1) parameter_buffer(0/1)\n", argv[0]);
    return 2;
}
