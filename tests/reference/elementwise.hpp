// Scalar references for the element-wise kernels, written the plainest way;
// used only by tests.
#pragma once

#include <cstddef>
#include <vector>

namespace petra::reference {

template <class T>
std::vector<T> add(const std::vector<T>& x, const std::vector<T>& y)
{
    std::vector<T> out(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) out[i] = x[i] + y[i];
    return out;
}

template <class T>
std::vector<T> subtract(const std::vector<T>& x, const std::vector<T>& y)
{
    std::vector<T> out(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) out[i] = x[i] - y[i];
    return out;
}

// y + alpha * x, with the product and the sum rounded separately.
template <class T>
std::vector<T> axpy(T alpha, const std::vector<T>& x, const std::vector<T>& y)
{
    std::vector<T> out(y.size());
    for (std::size_t i = 0; i < y.size(); ++i) {
        const T product = alpha * x[i];
        out[i] = y[i] + product;
    }
    return out;
}

template <class T>
std::vector<T> scale(T alpha, const std::vector<T>& x)
{
    std::vector<T> out(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) out[i] = alpha * x[i];
    return out;
}

template <class T>
std::vector<T> relu_forward(const std::vector<T>& x)
{
    std::vector<T> out(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) out[i] = x[i] > T(0) ? x[i] : T(0);
    return out;
}

template <class T>
std::vector<T> relu_backward(const std::vector<T>& x, const std::vector<T>& grad_y)
{
    std::vector<T> grad_x(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) grad_x[i] = x[i] > T(0) ? grad_y[i] : T(0);
    return grad_x;
}

} // namespace petra::reference
