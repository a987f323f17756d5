// Learning-rate schedules, as the paper trains: a linear warm-up to the peak
// rate, then either a constant rate, step decay (times factor at each
// milestone) or a cosine decay to zero at total_steps. A schedule is a value:
// the rate of step s (counted from 0) is schedule(s).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <numbers>

namespace petra {

// The paper's scaling rule: 0.1 for every 256 examples per optimizer step
// (batch examples per micro-batch, accumulation micro-batches per step).
constexpr double scaled_learning_rate(std::size_t batch, std::size_t accumulation, double per_256 = 0.1)
{
    return per_256 * double(batch) * double(accumulation) / 256.0;
}

struct learning_rate_schedule {
    enum class decay { constant, step, cosine };

    double peak = 0.1;
    // Steps 0 .. warmup_steps - 1 rise linearly: step s has peak * (s + 1) / warmup_steps.
    std::size_t warmup_steps = 0;
    decay shape = decay::constant;
    // decay::step: the rate is multiplied by factor at each milestone (a step
    // index; zeros are unused entries).
    std::array<std::size_t, 4> milestones{};
    double factor = 0.1;
    // decay::cosine: from peak at the end of the warm-up to zero at
    // total_steps, the number of optimizer steps of the run (with
    // accumulation k, an epoch of M micro-batches takes ceil(M / k) steps:
    // its last partial accumulation is a step too). Left at 0 (or not past
    // the warm-up), the rate stays at peak.
    std::size_t total_steps = 0;

    double operator()(std::size_t step) const
    {
        if (step < warmup_steps) return peak * double(step + 1) / double(warmup_steps);
        switch (shape) {
        case decay::constant: return peak;
        case decay::step: {
            double rate = peak;
            for (std::size_t milestone : milestones) {
                if (milestone != 0 && step >= milestone) rate *= factor;
            }
            return rate;
        }
        case decay::cosine: {
            if (total_steps <= warmup_steps) return peak;
            const double progress = std::min(1.0, double(step - warmup_steps) / double(total_steps - warmup_steps));
            return 0.5 * peak * (1.0 + std::cos(std::numbers::pi * progress));
        }
        }
        return peak;
    }
};

} // namespace petra
