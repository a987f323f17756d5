// GEMM against its scalar reference: every transposition variant, float and
// double, sizes that are not multiples of the vector width, the register tile
// or the cache blocks, padded leading dimensions and the alpha/beta cases.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <petra/kernels/gemm.hpp>

#include "reference/gemm.hpp"
#include "support.hpp"

namespace {

using petra::kernels::gemm_blocking;
using petra::kernels::transpose;

struct gemm_case {
    std::size_t m, n, k;
    transpose op_a, op_b;
    std::size_t padding; // added to every leading dimension
    double alpha, beta;
};

// Runs one case through petra and the reference on the same random inputs.
// With beta == 0 the kernel's C starts as NaN: it must neither read it nor
// leave an element unwritten.
template <class T>
void check_gemm(const gemm_case& g, std::mt19937_64& generator)
{
    const std::size_t a_rows = g.op_a == transpose::no ? g.m : g.k;
    const std::size_t a_columns = g.op_a == transpose::no ? g.k : g.m;
    const std::size_t b_rows = g.op_b == transpose::no ? g.k : g.n;
    const std::size_t b_columns = g.op_b == transpose::no ? g.n : g.k;
    const std::size_t lda = a_columns + g.padding, ldb = b_columns + g.padding, ldc = g.n + g.padding;
    const auto a = petra::test::random_vector<T>(a_rows * lda, generator);
    const auto b = petra::test::random_vector<T>(b_rows * ldb, generator);
    auto expected =
        g.beta == 0 ? petra::test::nan_vector<T>(g.m * ldc) : petra::test::random_vector<T>(g.m * ldc, generator);
    auto actual = expected;
    const auto arguments_into = [&](T* c) {
        return petra::kernels::gemm_arguments<T>{.op_a = g.op_a,
                                                 .op_b = g.op_b,
                                                 .m = g.m,
                                                 .n = g.n,
                                                 .k = g.k,
                                                 .alpha = T(g.alpha),
                                                 .a = a.data(),
                                                 .lda = lda,
                                                 .b = b.data(),
                                                 .ldb = ldb,
                                                 .beta = T(g.beta),
                                                 .c = c,
                                                 .ldc = ldc};
    };
    petra::reference::gemm<T>(arguments_into(expected.data()));
    petra::kernels::gemm<T>(arguments_into(actual.data()));
    // Compare the m x n result only; the padding columns stay as they were.
    std::vector<T> actual_result, expected_result;
    for (std::size_t i = 0; i < g.m; ++i) {
        for (std::size_t j = 0; j < g.n; ++j) {
            actual_result.push_back(actual[i * ldc + j]);
            expected_result.push_back(expected[i * ldc + j]);
        }
        for (std::size_t j = g.n; j < ldc; ++j) {
            // NaN == NaN is false: compare bit patterns through the ordering-free check.
            const bool same =
                (actual[i * ldc + j] == expected[i * ldc + j]) ||
                (actual[i * ldc + j] != actual[i * ldc + j] && expected[i * ldc + j] != expected[i * ldc + j]);
            REQUIRE_MESSAGE(same, "gemm wrote outside the m x n result, row " << i << " column " << j);
        }
    }
    INFO("m=" << g.m << " n=" << g.n << " k=" << g.k << " op_a=" << (g.op_a == transpose::yes)
              << " op_b=" << (g.op_b == transpose::yes) << " alpha=" << g.alpha << " beta=" << g.beta);
    petra::test::check_close(actual_result, expected_result, petra::test::accumulation_tolerance<T>(g.k + 1));
}

constexpr transpose both[] = {transpose::no, transpose::yes};

} // namespace

TEST_CASE_TEMPLATE("gemm matches the reference on every small shape and transposition", T, float, double)
{
    std::mt19937_64 generator(20261129);
    const std::size_t sizes[] = {1, 7, 8, 9, 33};
    for (transpose op_a : both)
        for (transpose op_b : both)
            for (std::size_t m : sizes)
                for (std::size_t n : sizes)
                    for (std::size_t k : sizes) check_gemm<T>({m, n, k, op_a, op_b, 0, 1.0, 0.0}, generator);
}

TEST_CASE_TEMPLATE("gemm matches the reference across register tiles and cache blocks", T, float, double)
{
    using blocking = gemm_blocking<T>;
    std::mt19937_64 generator(7);
    // Sizes around the micro-tile (mr, nr) and the blocks (kc, nc, mc), so
    // that every edge of the engine is crossed at least once.
    const std::vector<gemm_case> shapes = {
        {100, 257, 33, transpose::no, transpose::no, 0, 1.0, 0.0},
        {257, 100, 257, transpose::no, transpose::no, 0, 1.0, 0.0},
        {blocking::mr + 1, blocking::nr + 1, blocking::kc + 1, transpose::no, transpose::no, 0, 1.0, 0.0},
        {blocking::mr - 1, blocking::nr - 1, blocking::kc - 1, transpose::no, transpose::no, 0, 1.0, 0.0},
        {33, blocking::nc + 17, 2 * blocking::kc + 5, transpose::no, transpose::no, 0, 1.0, 0.0},
        {blocking::mc + 9, 9, 7, transpose::no, transpose::no, 0, 1.0, 0.0},
    };
    for (const gemm_case& shape : shapes) {
        for (transpose op_a : both) {
            for (transpose op_b : both) {
                gemm_case g = shape;
                g.op_a = op_a;
                g.op_b = op_b;
                check_gemm<T>(g, generator);
            }
        }
    }
}

TEST_CASE_TEMPLATE("gemm honours alpha, beta and padded leading dimensions", T, float, double)
{
    std::mt19937_64 generator(11);
    for (transpose op_a : both) {
        for (transpose op_b : both) {
            check_gemm<T>({9, 33, 100, op_a, op_b, 5, -0.5, 0.0}, generator);
            check_gemm<T>({9, 33, 100, op_a, op_b, 3, 1.0, 1.0}, generator);
            check_gemm<T>({57, 65, 400, op_a, op_b, 1, 2.0, 0.25}, generator);
        }
    }
}

TEST_CASE_TEMPLATE("gemm with k == 0 or alpha == 0 scales C by beta without reading A or B", T, float, double)
{
    std::mt19937_64 generator(3);
    const std::size_t m = 7, n = 9;
    auto c = petra::test::random_vector<T>(m * n, generator);
    const auto original = c;
    petra::kernels::gemm<T>({.op_a = transpose::no,
                             .op_b = transpose::no,
                             .m = m,
                             .n = n,
                             .k = 0,
                             .alpha = T(1),
                             .a = nullptr,
                             .lda = 1,
                             .b = nullptr,
                             .ldb = n,
                             .beta = T(0.5),
                             .c = c.data(),
                             .ldc = n});
    for (std::size_t i = 0; i < c.size(); ++i) CHECK(c[i] == T(0.5) * original[i]);
    auto poisoned = petra::test::nan_vector<T>(m * n);
    petra::kernels::gemm<T>({.op_a = transpose::no,
                             .op_b = transpose::no,
                             .m = m,
                             .n = n,
                             .k = 4,
                             .alpha = T(0),
                             .a = nullptr,
                             .lda = 4,
                             .b = nullptr,
                             .ldb = n,
                             .beta = T(0),
                             .c = poisoned.data(),
                             .ldc = n});
    for (T value : poisoned) CHECK(value == T(0));
}

TEST_CASE("gemm rejects leading dimensions that are too small, naming the argument")
{
    std::vector<float> a(64), b(64), c(64);
    auto call = [&](std::size_t lda, std::size_t ldb, std::size_t ldc) {
        petra::kernels::gemm<float>({.op_a = transpose::no,
                                     .op_b = transpose::yes,
                                     .m = 4,
                                     .n = 4,
                                     .k = 4,
                                     .alpha = 1.0f,
                                     .a = a.data(),
                                     .lda = lda,
                                     .b = b.data(),
                                     .ldb = ldb,
                                     .beta = 0.0f,
                                     .c = c.data(),
                                     .ldc = ldc});
    };
    CHECK_NOTHROW(call(4, 4, 4));
    CHECK_THROWS_WITH_AS(call(3, 4, 4), doctest::Contains("lda"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(call(4, 3, 4), doctest::Contains("ldb"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(call(4, 4, 3), doctest::Contains("ldc"), std::invalid_argument);
}

TEST_CASE_TEMPLATE("gemm in a caller's scratch region computes the same numbers, takes exactly its demand", T, float,
                   double)
{
    using blocking = gemm_blocking<T>;
    using petra::kernels::buffer_alignment;
    std::mt19937_64 generator(12);
    const std::size_t shapes[][3] = {
        {1, 1, 1}, {9, 33, 100}, {blocking::mc + 9, blocking::nc + 17, 2 * blocking::kc + 5}};
    for (const auto& shape : shapes) {
        // Named copies, not structured bindings: clang++ 14's lambdas (INFO
        // captures) cannot capture a binding.
        const std::size_t m = shape[0], n = shape[1], k = shape[2];
        INFO("m=" << m << " n=" << n << " k=" << k);
        const auto a = petra::test::random_vector<T>(m * k, generator);
        const auto b = petra::test::random_vector<T>(k * n, generator);
        auto per_thread = petra::test::nan_vector<T>(m * n), carved = per_thread;
        const std::size_t bytes = petra::kernels::gemm_scratch<T>(m, n, k).region_bytes();
        // Room for a cache-line boundary and a guard line after the region.
        std::vector<std::byte> storage(bytes + 3 * buffer_alignment, std::byte{0x5a});
        const auto address = reinterpret_cast<std::uintptr_t>(storage.data());
        std::byte* start = storage.data() + (buffer_alignment - address % buffer_alignment) % buffer_alignment;
        const auto product_into = [&](T* c) {
            return petra::kernels::gemm_arguments<T>{.op_a = transpose::no,
                                                     .op_b = transpose::no,
                                                     .m = m,
                                                     .n = n,
                                                     .k = k,
                                                     .alpha = T(1),
                                                     .a = a.data(),
                                                     .lda = k,
                                                     .b = b.data(),
                                                     .ldb = n,
                                                     .beta = T(0),
                                                     .c = c,
                                                     .ldc = n};
        };
        petra::kernels::gemm<T>(product_into(per_thread.data()));
        petra::kernels::gemm<T>(product_into(carved.data()), std::span<std::byte>(start, bytes));
        CHECK(std::equal(per_thread.begin(), per_thread.end(), carved.begin()));
        CHECK(std::all_of(start + bytes, start + bytes + buffer_alignment,
                          [](std::byte v) { return v == std::byte{0x5a}; }));
        CHECK_THROWS_WITH_AS(
            petra::kernels::gemm<T>(product_into(carved.data()), std::span<std::byte>(start, bytes - buffer_alignment)),
            doctest::Contains("scratch region is too small"), std::invalid_argument);
    }
    static_assert(petra::kernels::gemm_scratch<T>(0, 5, 5).region_bytes() == 0);
}
