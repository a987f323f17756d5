// Stochastic gradient descent with momentum (optionally Nesterov's) and
// weight decay restricted to weights: the optimizer of the paper's
// experiments. One instance per pipeline stage, over that stage's slice of
// the parameters; its state (the velocity) is the same length.
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include <petra/error.hpp>
#include <petra/kernels/optimizer.hpp>
#include <petra/kernels/simd.hpp>
#include <petra/state_archive.hpp>

namespace petra {

struct sgd_options {
    double momentum = 0.9;
    bool nesterov = true;
    // Applied only where the weight mask is 1 (convolution and dense
    // weights), never to biases or batch-norm parameters.
    double weight_decay = 5e-4;
};

template <class T>
class sgd {
public:
    using options = sgd_options;

    // weight_mask: 1 for each parameter that decays, 0 for the others
    // (network::weight_mask, or its slice for one stage); copied.
    sgd(const sgd_options& settings, std::span<const T> weight_mask)
        : settings_(settings), mask_(weight_mask.begin(), weight_mask.end()), velocity_(weight_mask.size(), T(0))
    {
        if (!(settings.momentum >= 0.0 && settings.momentum < 1.0)) {
            raise_error(error_kind::invalid_argument,
                        "sgd: the momentum must be in [0, 1), not " + std::to_string(settings.momentum) + ".");
        }
        if (!(settings.weight_decay >= 0.0)) {
            raise_error(error_kind::invalid_argument, "sgd: the weight decay must be non-negative, not " +
                                                          std::to_string(settings.weight_decay) + ".");
        }
    }

    // One step: parameters -= learning_rate * (Nesterov) momentum of
    // (gradient_sum / count + weight_decay * weights). gradient_sum is the sum
    // of the gradients of count micro-batches (each the gradient of a mean
    // loss). No allocation.
    void step(std::span<T> parameters, std::span<const T> gradient_sum, std::size_t count, double learning_rate)
    {
        if (parameters.size() != mask_.size() || gradient_sum.size() != mask_.size() || count == 0) {
            raise_error(error_kind::invalid_argument,
                        "sgd: step on " + std::to_string(parameters.size()) + " parameters and " +
                            std::to_string(gradient_sum.size()) + " gradient values (" + std::to_string(count) +
                            " micro-batches) with a mask of " + std::to_string(mask_.size()) + ".");
        }
        const kernels::sgd_coefficients<T> coefficients{T(learning_rate), T(settings_.momentum),
                                                        T(settings_.weight_decay), T(1) / T(count), settings_.nesterov};
        kernels::sgd_update(parameters.size(), coefficients, mask_.data(), gradient_sum.data(), velocity_.data(),
                            parameters.data());
    }

    // The velocity, for checkpoints (the settings and mask come from the
    // constructor).
    template <state_archive Archive>
    void transfer_state(Archive& archive)
    {
        archive.section("sgd");
        archive.expect(velocity_.size(), "optimizer values");
        archive.values(std::span<T>(velocity_));
    }

    // Bytes an instance over parameter_count parameters holds: the velocity
    // and its copy of the weight mask (for memory_plan).
    static constexpr std::size_t state_bytes(std::size_t parameter_count) { return 2 * parameter_count * sizeof(T); }

    std::span<T> velocity() { return velocity_; }
    std::span<const T> velocity() const { return velocity_; }
    const sgd_options& settings() const { return settings_; }

private:
    sgd_options settings_;
    kernels::aligned_vector<T> mask_;
    kernels::aligned_vector<T> velocity_;
};

} // namespace petra
