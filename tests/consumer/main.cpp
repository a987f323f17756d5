// Uses the umbrella header and one kernel, and checks the result, so that a
// consumer build proves the headers, the include paths and the dependencies.
#include <petra/petra.hpp>

#include <cstdio>

int main()
{
    const float a[4] = {1, 2, 3, 4}; // [[1, 2], [3, 4]]
    const float b[4] = {5, 6, 7, 8}; // [[5, 6], [7, 8]]
    float c[4] = {};
    using petra::kernels::transpose;
    petra::kernels::gemm<float>({.op_a = transpose::no,
                                 .op_b = transpose::no,
                                 .m = 2,
                                 .n = 2,
                                 .k = 2,
                                 .alpha = 1.0f,
                                 .a = a,
                                 .lda = 2,
                                 .b = b,
                                 .ldb = 2,
                                 .beta = 0.0f,
                                 .c = c,
                                 .ldc = 2});
    const float expected[4] = {19, 22, 43, 50};
    for (int i = 0; i < 4; ++i) {
        if (c[i] != expected[i]) {
            std::printf("consumer: wrong product at %d: %g instead of %g\n", i, double(c[i]), double(expected[i]));
            return 1;
        }
    }
    std::printf("consumer: petra %s works\n", PETRA_VERSION_STRING);
    return 0;
}
