// What the training loop's tests share: 40 examples of the pipeline tests'
// network whose class shows in their brightness (10 micro-batches of 4),
// a digest of a network's parameters, and the optimizer's settings.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include <petra/petra.hpp>

#include "pipeline/pipeline_support.hpp"

namespace petra::test {

struct loop_examples {
    using input = pipeline_network::input;
    std::vector<float> images = std::vector<float>(40 * input::size);
    std::vector<std::int32_t> labels = std::vector<std::int32_t>(40);

    loop_examples()
    {
        std::mt19937_64 generator(7);
        for (std::size_t n = 0; n < labels.size(); ++n) {
            labels[n] = std::int32_t(n % 3);
            for (std::size_t i = 0; i < input::size; ++i) {
                images[n * input::size + i] = float(standard_normal(generator)) + 0.5f * float(labels[n]);
            }
        }
    }
};

// FNV-1a of the parameters and running statistics.
inline std::uint64_t parameter_digest(const network_parameters<pipeline_network, float>& parameters)
{
    std::uint64_t hash = 14695981039346656037ull;
    for (std::span<const float> values : {parameters.values(), parameters.state()}) {
        const auto* bytes = reinterpret_cast<const unsigned char*>(values.data());
        for (std::size_t i = 0; i < values.size_bytes(); ++i) hash = (hash ^ bytes[i]) * 1099511628211ull;
    }
    return hash;
}

inline const sgd_options loop_optimizer{.momentum = 0.9, .nesterov = true, .weight_decay = 5e-4};

} // namespace petra::test
