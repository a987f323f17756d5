// Scalar references of kernels/convolution.hpp, used only by the tests: the
// definition of the convolution written as nested loops, accumulating in long
// double.
#pragma once

#include <cstddef>
#include <vector>

#include <petra/kernels/convolution.hpp>

namespace petra::reference {

// Calls visit(n, co, oh, ow, ci, ih, iw, kh, kw) for every weight tap of every
// output value that reads an input value inside the image (padding skipped).
template <class Visit>
void for_each_convolution_term(const kernels::convolution_shape& s, Visit&& visit)
{
    for (std::size_t n = 0; n < s.batch; ++n)
        for (std::size_t co = 0; co < s.out_channels; ++co)
            for (std::size_t oh = 0; oh < s.out_height(); ++oh)
                for (std::size_t ow = 0; ow < s.out_width(); ++ow)
                    for (std::size_t ci = 0; ci < s.in_channels; ++ci)
                        for (std::size_t kh = 0; kh < s.kernel; ++kh)
                            for (std::size_t kw = 0; kw < s.kernel; ++kw) {
                                const long ih = long(oh * s.stride + kh) - long(s.padding);
                                const long iw = long(ow * s.stride + kw) - long(s.padding);
                                if (ih < 0 || iw < 0 || ih >= long(s.in_height) || iw >= long(s.in_width)) continue;
                                visit(n, co, oh, ow, ci, std::size_t(ih), std::size_t(iw), kh, kw);
                            }
}

inline std::size_t input_index(const kernels::convolution_shape& s, std::size_t n, std::size_t c, std::size_t h,
                               std::size_t w)
{
    return ((n * s.in_channels + c) * s.in_height + h) * s.in_width + w;
}
inline std::size_t output_index(const kernels::convolution_shape& s, std::size_t n, std::size_t c, std::size_t h,
                                std::size_t w)
{
    return ((n * s.out_channels + c) * s.out_height() + h) * s.out_width() + w;
}
inline std::size_t weight_index(const kernels::convolution_shape& s, std::size_t co, std::size_t ci, std::size_t kh,
                                std::size_t kw)
{
    return ((co * s.in_channels + ci) * s.kernel + kh) * s.kernel + kw;
}

template <class T>
void convolution_forward(const kernels::convolution_shape& s, const T* input, const T* weights, T* output)
{
    std::vector<long double> sum(s.output_count(), 0.0L);
    for_each_convolution_term(s, [&](auto n, auto co, auto oh, auto ow, auto ci, auto ih, auto iw, auto kh, auto kw) {
        sum[output_index(s, n, co, oh, ow)] +=
            static_cast<long double>(weights[weight_index(s, co, ci, kh, kw)]) * input[input_index(s, n, ci, ih, iw)];
    });
    for (std::size_t i = 0; i < sum.size(); ++i) output[i] = static_cast<T>(sum[i]);
}

template <class T>
void convolution_backward_input(const kernels::convolution_shape& s, const T* grad_y, const T* weights, T* grad_x,
                                T beta)
{
    std::vector<long double> sum(s.input_count(), 0.0L);
    for_each_convolution_term(s, [&](auto n, auto co, auto oh, auto ow, auto ci, auto ih, auto iw, auto kh, auto kw) {
        sum[input_index(s, n, ci, ih, iw)] +=
            static_cast<long double>(weights[weight_index(s, co, ci, kh, kw)]) * grad_y[output_index(s, n, co, oh, ow)];
    });
    for (std::size_t i = 0; i < sum.size(); ++i) {
        grad_x[i] = static_cast<T>(sum[i] + (beta == T(0) ? 0.0L : static_cast<long double>(beta) * grad_x[i]));
    }
}

template <class T>
void convolution_backward_weights(const kernels::convolution_shape& s, const T* input, const T* grad_y, T* grad_weights,
                                  T beta)
{
    std::vector<long double> sum(s.weight_count(), 0.0L);
    for_each_convolution_term(s, [&](auto n, auto co, auto oh, auto ow, auto ci, auto ih, auto iw, auto kh, auto kw) {
        sum[weight_index(s, co, ci, kh, kw)] +=
            static_cast<long double>(input[input_index(s, n, ci, ih, iw)]) * grad_y[output_index(s, n, co, oh, ow)];
    });
    for (std::size_t i = 0; i < sum.size(); ++i) {
        grad_weights[i] =
            static_cast<T>(sum[i] + (beta == T(0) ? 0.0L : static_cast<long double>(beta) * grad_weights[i]));
    }
}

} // namespace petra::reference
