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
std::vector<long double> channel_combination(std::size_t N, std::size_t C, std::size_t S, const std::vector<T>& g,
                                             const std::vector<T>& x, const std::vector<T>& a,
                                             const std::vector<T>& b, const std::vector<T>& d)
{
    std::vector<long double> out(x.size());
    for (std::size_t n = 0; n < N; ++n)
        for (std::size_t c = 0; c < C; ++c)
            for (std::size_t s = 0; s < S; ++s) {
                const std::size_t i = (n * C + c) * S + s;
                out[i] = (long double)a[c] * g[i] + (long double)b[c] * x[i] + d[c];
            }
    return out;
}

template <class T>
void channel_gradient_sums(std::size_t N, std::size_t C, std::size_t S, const std::vector<T>& g,
                           const std::vector<T>& x, const std::vector<T>& center, std::vector<long double>& sum_g,
                           std::vector<long double>& sum_gd)
{
    sum_g.assign(C, 0.0L);
    sum_gd.assign(C, 0.0L);
    for (std::size_t n = 0; n < N; ++n)
        for (std::size_t c = 0; c < C; ++c)
            for (std::size_t s = 0; s < S; ++s) {
                const std::size_t i = (n * C + c) * S + s;
                sum_g[c] += g[i];
                sum_gd[c] += (long double)g[i] * ((long double)x[i] - center[c]);
            }
}

} // namespace petra::reference
