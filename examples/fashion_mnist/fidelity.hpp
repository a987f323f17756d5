// Gradient fidelity of a PETRA run: how close the gradient each stage
// applies is to the true gradient.
//
// A measurement covers one tick t. The pipeline is paused just before it
// (every stage between ticks t - 1 and t), so that the network's parameters
// theta^t are those every stage uses at tick t; they are copied. Tick t is
// then run, and for each stage j the gradient it computes there for its
// micro-batch m_j = t - 2 (J - 1) + j (its stage's share, from reconstructed
// or kept inputs and delayed activations) is taken from the pipeline's
// trace. The true gradient of m_j at theta^t is exact backprop of the whole
// network at the copy; for each stage, its slice is compared with what the
// stage computed: cosine similarity and norm ratio (PETRA's / true). With
// accumulation the stage's running sum is read before and after the tick;
// their difference is m_j's gradient alone.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include <petra/petra.hpp>

namespace fashion {

// Cosine similarity of a and b, and norm(a) / norm(b), accumulated in double.
inline std::pair<double, double> cosine_and_norm_ratio(std::span<const float> a, std::span<const float> b)
{
    double dot = 0, aa = 0, bb = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
        dot += double(a[i]) * double(b[i]);
        aa += double(a[i]) * double(a[i]);
        bb += double(b[i]) * double(b[i]);
    }
    const double cosine = aa > 0 && bb > 0 ? dot / std::sqrt(aa * bb) : 0.0;
    const double ratio = bb > 0 ? std::sqrt(aa / bb) : 0.0;
    return {cosine, ratio};
}

struct stage_fidelity {
    std::size_t stage = 0;
    std::size_t micro_batch = 0; // within the epoch
    double cosine = 0;
    double norm_ratio = 0;
};

// One per PETRA run that measures. Keeps the last micro-batches fed (the
// true gradient needs m_j's examples as they were fed, augmentation
// included), a copy of the parameters, and an exact-backprop trainer.
template <class Network, auto Cuts>
class fidelity_probe {
public:
    static constexpr std::size_t stage_count = Cuts.size() - 1;
    // A stage differentiates at tick t a micro-batch fed up to 2 (J - 1)
    // ticks before.
    static constexpr std::size_t history = 2 * (stage_count - 1) + 1;

    explicit fidelity_probe(std::size_t batch)
        : batch_(batch), trainer_(batch), copy_(Network::template make_parameters<float>(0)),
          true_gradient_(Network::parameter_count), images_(history * batch * Network::input::size),
          labels_(history * batch)
    {
        for (std::size_t j = 0; j < stage_count; ++j) {
            const std::size_t size = slice_size(j);
            before_[j].resize(size);
            after_[j].resize(size);
        }
    }

    // Every micro-batch fed, with its index in the epoch.
    void remember(std::size_t micro_batch, const float* images, const std::int32_t* labels)
    {
        if (micro_batch != next_) first_ = micro_batch; // a new epoch, or a resumed run
        next_ = micro_batch + 1;
        const std::size_t slot = micro_batch % history;
        std::copy(images, images + batch_ * Network::input::size,
                  images_.data() + slot * batch_ * Network::input::size);
        std::copy(labels, labels + batch_, labels_.data() + slot * batch_);
    }

    // Whether the tick of the micro-batch just remembered can be measured:
    // every stage differentiates there a micro-batch of this epoch that was
    // remembered (not one fed before a resume).
    bool measurable() const { return next_ >= first_ + history; }

    // Before the tick, read through the pipeline's pause guard: the
    // parameters and each stage's gradient sum so far.
    void before_tick(const petra::paused_pipeline<Network, Cuts, float>& paused, std::size_t tick)
    {
        std::ranges::copy(paused.parameters(), copy_.values().begin());
        std::ranges::copy(paused.state(), copy_.state().begin());
        tick_ = tick;
        for (std::size_t j = 0; j < stage_count; ++j) copy_sum(paused.gradient_sum(j), before_[j]);
        captured_.fill(false);
        armed_ = true;
    }

    // The pipeline's trace, on the stages' threads: the sum right after
    // the armed tick's backward. Each stage writes only its own slot; the
    // pipeline's pause orders these writes before after_tick reads them.
    void observe(const petra::pipeline_event<float>& event)
    {
        if (!armed_ || event.what != petra::pipeline_event<float>::kind::backward || event.tick != tick_) return;
        copy_sum(event.gradient, after_[event.stage]);
        micro_batch_[event.stage] = event.micro_batch;
        captured_[event.stage] = true;
    }

    // After the tick, with the pipeline paused again: one measurement per
    // stage.
    std::vector<stage_fidelity> after_tick()
    {
        armed_ = false;
        std::vector<stage_fidelity> results;
        for (std::size_t j = 0; j < stage_count; ++j) {
            if (!captured_[j]) continue;
            const std::size_t m = micro_batch_[j];
            const std::size_t slot = m % history;
            std::fill(true_gradient_.begin(), true_gradient_.end(), 0.0f);
            petra::network_parameters<Network, float> at = copy_; // running statistics untouched between stages
            trainer_.accumulate_gradient(at, batch_, images_.data() + slot * batch_ * Network::input::size,
                                         labels_.data() + slot * batch_, true_gradient_);
            std::vector<float>& applied = after_[j];
            for (std::size_t i = 0; i < applied.size(); ++i) applied[i] -= before_[j][i];
            const std::span<const float> truth(true_gradient_.data() + offset(j), slice_size(j));
            const auto [cosine, ratio] = cosine_and_norm_ratio(applied, truth);
            results.push_back({j, m, cosine, ratio});
        }
        return results;
    }

private:
    static constexpr std::size_t offset(std::size_t j) { return Network::parameter_offsets[Cuts[j]]; }
    static constexpr std::size_t slice_size(std::size_t j)
    {
        return Network::parameter_offsets[Cuts[j + 1]] - Network::parameter_offsets[Cuts[j]];
    }
    static void copy_sum(std::span<const float> from, std::vector<float>& to)
    {
        std::copy(from.begin(), from.end(), to.begin());
    }

    std::size_t batch_;
    petra::exact_backprop<Network, float> trainer_;
    petra::network_parameters<Network, float> copy_;
    std::vector<float> true_gradient_;
    std::vector<float> images_;
    std::vector<std::int32_t> labels_;
    std::array<std::vector<float>, stage_count> before_;
    std::array<std::vector<float>, stage_count> after_;
    std::array<std::size_t, stage_count> micro_batch_{};
    std::array<bool, stage_count> captured_{}; // one byte per stage: each thread writes its own
    std::size_t tick_ = 0;
    bool armed_ = false;
    std::size_t first_ = 0; // the first micro-batch of the run of consecutive ones remembered
    std::size_t next_ = std::size_t(-1);
};

} // namespace fashion
