// Scalar reference of kernels/bf16.hpp, used only by the tests: the
// textbook triple loop over the operands rounded to bf16, accumulating in
// long double, and beside each result the sum of its products' magnitudes
// (what a float accumulation's rounding error is proportional to).
#pragma once

#include <cmath>
#include <cstddef>
#include <vector>

#include <petra/kernels/bf16.hpp>

namespace petra::reference {

// Writes gemm_bf16's result to arguments.c and returns, for every element of
// C (row-major, ldc apart), alpha times the sum of |op(A) op(B)| over the
// depth, rounded operands.
inline std::vector<double> gemm_bf16(const kernels::gemm_arguments<float>& arguments)
{
    const auto rounded = [](float value) {
        return static_cast<long double>(kernels::bf16_to_float(kernels::round_to_bf16(value)));
    };
    const std::size_t m = arguments.m, n = arguments.n, k = arguments.k;
    std::vector<double> magnitudes(m * arguments.ldc, 0.0);
    for (std::size_t i = 0; i < m; ++i) {
        for (std::size_t j = 0; j < n; ++j) {
            long double sum = 0, magnitude = 0;
            for (std::size_t p = 0; p < k; ++p) {
                const float a = arguments.op_a == kernels::transpose::no ? arguments.a[i * arguments.lda + p]
                                                                         : arguments.a[p * arguments.lda + i];
                const float b = arguments.op_b == kernels::transpose::no ? arguments.b[p * arguments.ldb + j]
                                                                         : arguments.b[j * arguments.ldb + p];
                sum += rounded(a) * rounded(b);
                magnitude += std::fabs(rounded(a) * rounded(b));
            }
            float& c = arguments.c[i * arguments.ldc + j];
            const long double previous = arguments.beta == 0.0f ? 0.0L : static_cast<long double>(arguments.beta) * c;
            c = static_cast<float>(arguments.alpha * sum + previous);
            magnitudes[i * arguments.ldc + j] = static_cast<double>(std::fabs(arguments.alpha) * magnitude);
        }
    }
    return magnitudes;
}

} // namespace petra::reference
