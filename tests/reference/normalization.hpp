// Scalar references for the batch-normalisation kernels, in long double, the
// plainest loops; used only by tests.
#pragma once

#include <cstddef>
#include <vector>

namespace petra::reference {

template <class T>
std::vector<long double> channel_affine(std::size_t N, std::size_t C, std::size_t S, const std::vector<T>& x,
                                        const std::vector<T>& scale, const std::vector<T>& shift)
{
    std::vector<long double> y(x.size());
    for (std::size_t n = 0; n < N; ++n)
        for (std::size_t c = 0; c < C; ++c)
            for (std::size_t s = 0; s < S; ++s) {
                const std::size_t i = (n * C + c) * S + s;
                y[i] = (long double)scale[c] * x[i] + shift[c];
            }
    return y;
}

template <class T>
std::vector<long double> channel_combination(std::size_t N, std::size_t C, std::size_t S, const std::vector<T>& grad_y,
                                             const std::vector<T>& x, const std::vector<T>& grad_y_coefficient,
                                             const std::vector<T>& x_coefficient, const std::vector<T>& offset)
{
    std::vector<long double> grad_x(x.size());
    for (std::size_t n = 0; n < N; ++n)
        for (std::size_t c = 0; c < C; ++c)
            for (std::size_t s = 0; s < S; ++s) {
                const std::size_t i = (n * C + c) * S + s;
                grad_x[i] =
                    (long double)grad_y_coefficient[c] * grad_y[i] + (long double)x_coefficient[c] * x[i] + offset[c];
            }
    return grad_x;
}

template <class T>
void channel_gradient_sums(std::size_t N, std::size_t C, std::size_t S, const std::vector<T>& grad_y,
                           const std::vector<T>& x, const std::vector<T>& mean, std::vector<long double>& sum_grad_y,
                           std::vector<long double>& sum_grad_y_deviation)
{
    sum_grad_y.assign(C, 0.0L);
    sum_grad_y_deviation.assign(C, 0.0L);
    for (std::size_t n = 0; n < N; ++n)
        for (std::size_t c = 0; c < C; ++c)
            for (std::size_t s = 0; s < S; ++s) {
                const std::size_t i = (n * C + c) * S + s;
                sum_grad_y[c] += grad_y[i];
                sum_grad_y_deviation[c] += (long double)grad_y[i] * ((long double)x[i] - mean[c]);
            }
}

} // namespace petra::reference
