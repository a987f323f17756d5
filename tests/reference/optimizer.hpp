// Scalar reference of the SGD update, in long double, one line per formula;
// used only by tests.
#pragma once

#include <cstddef>
#include <vector>

namespace petra::reference {

template <class T>
void sgd_update(long double learning_rate, long double momentum, long double weight_decay, long double gradient_scale,
                bool nesterov, const std::vector<T>& decay_mask, const std::vector<T>& gradient,
                std::vector<long double>& velocity, std::vector<long double>& parameters)
{
    for (std::size_t i = 0; i < parameters.size(); ++i) {
        const long double g = gradient_scale * gradient[i] + weight_decay * decay_mask[i] * parameters[i];
        velocity[i] = momentum * velocity[i] + g;
        const long double step = nesterov ? g + momentum * velocity[i] : velocity[i];
        parameters[i] -= learning_rate * step;
    }
}

} // namespace petra::reference
