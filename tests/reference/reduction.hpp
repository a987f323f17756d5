// Scalar references for the per-channel reductions of an NCHW batch, in
// double whatever the input type; used only by tests.
#pragma once

#include <cstddef>
#include <vector>

namespace petra::reference {

template <class T>
std::vector<double> channel_sum(std::size_t N, std::size_t C, std::size_t S, const std::vector<T>& x)
{
    std::vector<double> sum(C, 0.0);
    for (std::size_t n = 0; n < N; ++n) {
        for (std::size_t c = 0; c < C; ++c) {
            for (std::size_t s = 0; s < S; ++s) sum[c] += static_cast<double>(x[(n * C + c) * S + s]);
        }
    }
    return sum;
}

struct mean_variance {
    std::vector<double> mean;
    std::vector<double> variance; // biased: divided by N * S
};

template <class T>
mean_variance channel_mean_variance(std::size_t N, std::size_t C, std::size_t S, const std::vector<T>& x)
{
    const double count = static_cast<double>(N * S);
    mean_variance result{channel_sum(N, C, S, x), std::vector<double>(C, 0.0)};
    for (double& mean : result.mean) mean /= count;
    for (std::size_t n = 0; n < N; ++n) {
        for (std::size_t c = 0; c < C; ++c) {
            for (std::size_t s = 0; s < S; ++s) {
                const double deviation = static_cast<double>(x[(n * C + c) * S + s]) - result.mean[c];
                result.variance[c] += deviation * deviation;
            }
        }
    }
    for (double& variance : result.variance) variance /= count;
    return result;
}

} // namespace petra::reference
