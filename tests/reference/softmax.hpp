// Scalar references for the softmax kernels, in double whatever the input
// type; used only by tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace petra::reference {

// Softmax of each row of a rows x classes matrix stored with leading
// dimension ld; the result is packed (leading dimension classes).
template <class T>
std::vector<double> softmax_rows(std::size_t rows, std::size_t classes, const std::vector<T>& logits, std::size_t ld)
{
    std::vector<double> probabilities(rows * classes);
    for (std::size_t r = 0; r < rows; ++r) {
        double largest = static_cast<double>(logits[r * ld]);
        for (std::size_t j = 0; j < classes; ++j) largest = std::max(largest, static_cast<double>(logits[r * ld + j]));
        double total = 0.0;
        for (std::size_t j = 0; j < classes; ++j) {
            probabilities[r * classes + j] = std::exp(static_cast<double>(logits[r * ld + j]) - largest);
            total += probabilities[r * classes + j];
        }
        for (std::size_t j = 0; j < classes; ++j) probabilities[r * classes + j] /= total;
    }
    return probabilities;
}

struct cross_entropy {
    double mean_loss;
    std::vector<double> probabilities; // rows x classes, packed
    std::vector<double> gradient;      // of mean_loss, rows x classes, packed
};

template <class T>
cross_entropy softmax_cross_entropy(std::size_t rows, std::size_t classes, const std::vector<T>& logits, std::size_t ld,
                                    const std::vector<std::int32_t>& labels)
{
    cross_entropy result{0.0, softmax_rows(rows, classes, logits, ld), std::vector<double>(rows * classes)};
    for (std::size_t r = 0; r < rows; ++r) {
        const auto label = static_cast<std::size_t>(labels[r]);
        result.mean_loss -= std::log(result.probabilities[r * classes + label]);
        for (std::size_t j = 0; j < classes; ++j) {
            const double target = j == label ? 1.0 : 0.0;
            result.gradient[r * classes + j] =
                (result.probabilities[r * classes + j] - target) / static_cast<double>(rows);
        }
    }
    result.mean_loss /= static_cast<double>(rows);
    return result;
}

} // namespace petra::reference
