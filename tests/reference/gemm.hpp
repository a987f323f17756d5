// Scalar reference of kernels/gemm.hpp, used only by the tests: the textbook
// triple loop, accumulating in long double.
#pragma once

#include <cstddef>

#include <petra/kernels/gemm.hpp>

namespace petra::reference {

// Takes the kernel's arguments, so that a test hands both the same ones.
template <class T>
void gemm(const kernels::gemm_arguments<T>& arguments)
{
    const kernels::transpose op_a = arguments.op_a, op_b = arguments.op_b;
    const std::size_t m = arguments.m, n = arguments.n, k = arguments.k;
    const std::size_t lda = arguments.lda, ldb = arguments.ldb, ldc = arguments.ldc;
    const T alpha = arguments.alpha, beta = arguments.beta;
    const T* a = arguments.a;
    const T* b = arguments.b;
    T* c = arguments.c;
    for (std::size_t i = 0; i < m; ++i) {
        for (std::size_t j = 0; j < n; ++j) {
            long double sum = 0;
            for (std::size_t p = 0; p < k; ++p) {
                const T a_ip = op_a == kernels::transpose::no ? a[i * lda + p] : a[p * lda + i];
                const T b_pj = op_b == kernels::transpose::no ? b[p * ldb + j] : b[j * ldb + p];
                sum += static_cast<long double>(a_ip) * b_pj;
            }
            const long double previous = beta == T(0) ? 0.0L : static_cast<long double>(beta) * c[i * ldc + j];
            c[i * ldc + j] = static_cast<T>(alpha * sum + previous);
        }
    }
}

} // namespace petra::reference
