// The reference network's training work as the benchmarks time it (batch
// 64, one thread each): an exact-backprop step and the ticks of PETRA's two
// stages at J = 2, with synthetic data, and the machine line their reports
// begin with. bench_breakdown times their kernels; bench_contention times
// the two stages' ticks side by side on two cores.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <fstream>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <petra/petra.hpp>
#include <petra/random.hpp>

namespace petra::bench::reference {

using net = petra::reference_network<>;

inline constexpr std::size_t batch = 64;
inline constexpr std::size_t classes = net::output::size;

// ---------------------------------------------------------------------------
// The calls into training code, one small function each: the trainer's and
// the stage's interfaces are being reworked (to take views), and only these
// lines should need to follow.

// Exact backprop: adds the batch's gradient to `gradient`, returns the loss.
inline float exact_backprop_gradient(petra::exact_backprop<net, float>& trainer,
                                     petra::network_parameters<net, float>& parameters, const float* images,
                                     const std::int32_t* labels, std::span<float> gradient)
{
    return trainer.accumulate_gradient(parameters, batch, images, labels, gradient);
}

template <class Stage>
void stage_forward(Stage& stage, const float* x, float* y)
{
    stage.forward(petra::batch_view<const float, typename Stage::input>(x, batch),
                  petra::batch_view<float, typename Stage::output>(y, batch));
}

template <class Stage>
void stage_backward(Stage& stage, const float* y, const float* grad_y, float* x, float* grad_x)
{
    stage.backward(petra::batch_view<const float, typename Stage::output>(y, batch),
                   petra::batch_view<const float, typename Stage::output>(grad_y, batch),
                   petra::batch_view<float, typename Stage::input>(x, batch),
                   petra::batch_view<float, typename Stage::input>(grad_x, batch));
}

// The last stage's loss and the gradient of its logits (the worker's work
// between forward and backward), on the kernel itself.
inline float loss_gradient(const float* logits, const std::int32_t* labels, float* grad_logits)
{
    return petra::kernels::softmax_cross_entropy<float>({.rows = batch,
                                                         .classes = classes,
                                                         .logits = logits,
                                                         .ld_logits = classes,
                                                         .labels = labels,
                                                         .probabilities = nullptr,
                                                         .grad_logits = grad_logits,
                                                         .ld_out = classes});
}

// The FLOPs a stage's tick is charged at compile time: forward,
// reconstruction (or recomputation) and backward of its blocks; the last
// stage reconstructs nothing.
template <class Stage>
double stage_tick_flops()
{
    return double(Stage::tick_flops) * double(batch);
}
// ---------------------------------------------------------------------------

struct batch_data {
    std::vector<float> images = std::vector<float>(batch * net::input::size);
    std::vector<std::int32_t> labels = std::vector<std::int32_t>(batch);

    batch_data()
    {
        std::mt19937_64 generator(1);
        // Normalised as the job normalises Fashion-MNIST.
        for (float& value : images) value = (petra::uniform_float(generator) - 0.2860f) / 0.3530f;
        for (auto& value : labels) value = petra::uniform_int(generator, std::int32_t(0), std::int32_t(classes) - 1);
    }
};

// Exact backprop as the job runs it: the gradient of a batch, then the
// optimizer over all parameters; in the precision asked.
class exact_backprop_step {
public:
    explicit exact_backprop_step(petra::precision arithmetic = petra::precision::fp32) : precision_(arithmetic) {}

    void operator()()
    {
        const petra::precision_scope scope(precision_);
        std::fill(gradient_.begin(), gradient_.end(), 0.0f);
        exact_backprop_gradient(trainer_, parameters_, data_.images.data(), data_.labels.data(), gradient_);
        optimizer_.step(parameters_.values(), gradient_, 1, 0.01);
    }

    static double useful_flops() { return double(net::forward_flops + net::backward_flops) * double(batch); }

private:
    petra::network_parameters<net, float> parameters_ = net::make_parameters<float>(1);
    petra::exact_backprop<net, float> trainer_{batch};
    petra::sgd<float> optimizer_{petra::sgd_options{}, net::weight_mask<float>()};
    std::vector<float> gradient_ = std::vector<float>(net::parameter_count);
    batch_data data_;
    petra::precision precision_;
};

// PETRA at J = 2, both stages on this thread, one micro-batch at a time:
// stage 0 forward, stage 1 forward, loss, backward and optimizer, then
// stage 0 backward (reconstructing) and optimizer. A tick of each stage is
// the same work as in the pipeline (where stage 0 differentiates an older
// micro-batch), without the channels.
class petra_ticks {
    static constexpr auto cuts = petra::reference_cuts<2>();

public:
    using first = petra::stage<net, cuts, 0, float>;
    using last = petra::stage<net, cuts, 1, float>;

    explicit petra_ticks(petra::precision arithmetic = petra::precision::fp32)
        : stage0_{parameters_, {.batch = batch, .precision = arithmetic}}, stage1_{parameters_,
                                                                                   {.batch = batch,
                                                                                    .precision = arithmetic}}
    {}

    // Stage 0's tick, in two parts around stage 1's.
    void first_forward() { stage_forward(stage0_, data_.images.data(), between_.data()); }
    void first_backward()
    {
        stage_backward(stage0_, rebuilt_.data(), grad_between_.data(), nullptr, nullptr);
        optimizer0_.step(stage0_.parameters(), stage0_.gradient(), 1, 0.01);
        stage0_.reset_gradient();
    }
    void last_tick()
    {
        stage_forward(stage1_, between_.data(), logits_.data());
        loss_gradient(logits_.data(), data_.labels.data(), grad_logits_.data());
        stage_backward(stage1_, logits_.data(), grad_logits_.data(), rebuilt_.data(), grad_between_.data());
        optimizer1_.step(stage1_.parameters(), stage1_.gradient(), 1, 0.01);
        stage1_.reset_gradient();
    }

    template <class Stage>
    static std::string name()
    {
        return "PETRA J=2, stage " + std::to_string(Stage::index) + " tick (blocks " +
               std::to_string(Stage::first_block) + " to " + std::to_string(Stage::end_block - 1) +
               (Stage::is_last ? ", with the loss)" : ")");
    }

private:
    template <class Stage>
    static std::span<const float> mask_of(const std::vector<float>& mask)
    {
        return std::span<const float>(mask).subspan(Stage::parameter_offset, Stage::parameter_count);
    }

    petra::network_parameters<net, float> parameters_ = net::make_parameters<float>(1);
    first stage0_;
    last stage1_;
    std::vector<float> mask_ = [] {
        const auto mask = net::weight_mask<float>();
        return std::vector<float>(mask.begin(), mask.end());
    }();
    petra::sgd<float> optimizer0_{petra::sgd_options{}, mask_of<first>(mask_)};
    petra::sgd<float> optimizer1_{petra::sgd_options{}, mask_of<last>(mask_)};
    batch_data data_;
    std::vector<float> between_ = std::vector<float>(batch * first::output_values);
    std::vector<float> rebuilt_ = std::vector<float>(batch * first::output_values);
    std::vector<float> grad_between_ = std::vector<float>(batch * first::output_values);
    std::vector<float> logits_ = std::vector<float>(batch * last::output_values);
    std::vector<float> grad_logits_ = std::vector<float>(batch * last::output_values);
};

// The CPU's name with its family and model numbers (a virtual machine's name
// may say no more than "AMD EPYC") and the caches the kernels block for.
inline std::string cpu_model()
{
    std::ifstream cpuinfo("/proc/cpuinfo");
    std::string line, name = "unknown CPU", family, model;
    while (std::getline(cpuinfo, line) && line.find(':') != std::string::npos) {
        const std::size_t colon = line.find(':');
        const std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : std::string();
        if (line.rfind("model name", 0) == 0) name = value;
        else if (line.rfind("cpu family", 0) == 0) family = value;
        else if (line.rfind("model", 0) == 0 && model.empty()) model = value;
    }
    if (!family.empty()) name += " (family " + family + " model " + model + ")";
    const petra::kernels::cache_sizes& caches = petra::kernels::this_core_caches();
    return name + ", L1d " + std::to_string(caches.l1_data >> 10) + " KiB, L2 " + std::to_string(caches.l2 >> 10) +
           " KiB, L3 " + std::to_string(caches.l3 >> 20) + " MiB";
}

inline std::string utc_now()
{
    const std::time_t now = std::time(nullptr);
    char text[32];
    std::strftime(text, sizeof text, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
    return text;
}

} // namespace petra::bench::reference
