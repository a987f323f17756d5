// Uses the umbrella header and one kernel, and checks the result, so that a
// consumer build proves the headers, the include paths and the dependencies.
#include <petra/petra.hpp>

#include <cstdio>

int main()
{
    const float a[4] = {1, 2, 3, 4}; // [[1, 2], [3, 4]]
    const float b[4] = {5, 6, 7, 8}; // [[5, 6], [7, 8]]
    float c[4] = {};
    petra::kernels::gemm<float>(petra::kernels::transpose::no, petra::kernels::transpose::no, 2, 2, 2, 1.0f, a, 2, b,
                                2, 0.0f, c, 2);
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
