// bf16 products (kernels/bf16.hpp): the rounding to bf16 value by value, the
// packers' conversion instruction against it bit for bit, and gemm_bf16 on
// every engine this CPU offers against the reference over the rounded
// operands (sizes off every tile and block, every transposition, alpha and
// beta), held to float accumulation; on a CPU without an engine, the refusal
// that names its instruction.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <petra/kernels/bf16.hpp>

#include "reference/bf16.hpp"
#include "reference/gemm.hpp"
#include "support.hpp"

namespace {

using petra::kernels::bf16_engine;
using petra::kernels::round_to_bf16;
using petra::kernels::transpose;

float from_bits(std::uint32_t bits) { return std::bit_cast<float>(bits); }

std::vector<bf16_engine> offered_engines()
{
    std::vector<bf16_engine> engines;
    if (petra::kernels::bf16_support().avx512_bf16) engines.push_back(bf16_engine::avx512_bf16);
    if (petra::kernels::bf16_support().amx) engines.push_back(bf16_engine::amx);
    return engines;
}

} // namespace

TEST_CASE("round_to_bf16 rounds to nearest, ties to even, and keeps signs, infinities and NaN")
{
    CHECK(round_to_bf16(1.0f) == 0x3f80);
    CHECK(round_to_bf16(-2.0f) == 0xc000);
    CHECK(round_to_bf16(from_bits(0x3f808000u)) == 0x3f80); // a tie, to the even 0x3f80
    CHECK(round_to_bf16(from_bits(0x3f818000u)) == 0x3f82); // a tie, to the even 0x3f82
    CHECK(round_to_bf16(from_bits(0x3f808001u)) == 0x3f81); // just above a tie
    CHECK(round_to_bf16(from_bits(0x3f807fffu)) == 0x3f80); // just below
    CHECK(round_to_bf16(from_bits(0x7f7fffffu)) == 0x7f80); // the largest float rounds to infinity
    CHECK(round_to_bf16(std::numeric_limits<float>::infinity()) == 0x7f80);
    CHECK(round_to_bf16(-std::numeric_limits<float>::infinity()) == 0xff80);
    CHECK(round_to_bf16(from_bits(0x7f800001u)) == 0x7fc0); // a signalling NaN, made quiet
    CHECK(round_to_bf16(from_bits(0xffc00000u)) == 0xffc0);
    CHECK(round_to_bf16(from_bits(0x00000001u)) == 0x0000); // denormals become zero of their sign
    CHECK(round_to_bf16(from_bits(0x807fffffu)) == 0x8000);
    CHECK(round_to_bf16(from_bits(0x00800000u)) == 0x0080); // the smallest normal stays
    CHECK(round_to_bf16(-0.0f) == 0x8000);
    // Every value within half a unit of bf16's last place of a random normal float.
    std::mt19937_64 generator(7);
    for (int i = 0; i < 10000; ++i) {
        const float x = from_bits(static_cast<std::uint32_t>(generator()));
        if (!std::isfinite(x) || std::fabs(x) < std::numeric_limits<float>::min()) continue;
        const float rounded = petra::kernels::bf16_to_float(round_to_bf16(x));
        const float unit = std::ldexp(1.0f, std::ilogb(x) - 7);
        CHECK(std::fabs(rounded - x) <= unit / 2);
    }
}

TEST_CASE("the packers' conversion instruction rounds every value as round_to_bf16 does")
{
    if (!petra::kernels::bf16_support().avx512_bf16) {
        MESSAGE("this CPU has no AVX512-BF16: only the scalar packers exist here");
        return;
    }
#if defined(PETRA_BF16_X86)
    namespace detail = petra::kernels::detail;
    // Random bit patterns (every class: denormals, NaN, infinities, ties)
    // in a 37 x 45 matrix; A packed row by row and B by strips, with the
    // instruction and value by value.
    std::mt19937_64 generator(11);
    const std::size_t rows = 37, columns = 45, ld = 47;
    std::vector<float> values(rows * ld);
    for (auto& value : values) {
        std::uint32_t bits = static_cast<std::uint32_t>(generator());
        if (generator() % 4 == 0) bits = (bits & 0xffff0000u) | (generator() % 2 ? 0x8000u : 0u); // ties, exact values
        if (generator() % 8 == 0) bits &= 0x807fffffu;                                            // denormals
        value = from_bits(bits);
    }
    using packing = detail::bf16_packing;
    std::vector<std::uint16_t> by_instruction(packing::packed_a_count(rows, columns), 1);
    std::vector<std::uint16_t> by_value(by_instruction.size(), 2);
    detail::pack_a_bf16_rows(values.data(), ld, rows, columns, by_instruction.data());
    detail::pack_a_bf16_scalar(values.data(), ld, 1, rows, columns, by_value.data());
    CHECK(by_instruction == by_value);
    // B: depth `rows`, the columns from the 5th on.
    std::vector<std::uint16_t> strips_by_instruction(packing::packed_b_count(columns - 5, rows), 1);
    std::vector<std::uint16_t> strips_by_value(strips_by_instruction.size(), 2);
    detail::pack_b_bf16_rows(values.data(), ld, rows, 5, columns - 5, strips_by_instruction.data());
    detail::pack_b_bf16_scalar(values.data(), ld, 1, rows, 5, columns - 5, strips_by_value.data());
    CHECK(strips_by_instruction == strips_by_value);
#endif
}

TEST_CASE("gemm_bf16 sums the rounded operands' products in float, on every engine this CPU offers")
{
    const std::vector<bf16_engine> engines = offered_engines();
    if (engines.empty()) MESSAGE("this CPU offers no bf16 engine: the refusals are tested below");
    struct product {
        std::size_t m, n, k;
    };
    // Off and on every multiple: the AVX-512 tile (8 x 48), AMX's blocks (32
    // x 32, depth 32), the packed column blocks (768).
    const product products[] = {{1, 1, 1},    {3, 5, 2},    {8, 48, 32},    {9, 49, 33},  {31, 17, 63},
                                {32, 96, 64}, {33, 97, 65}, {64, 200, 288}, {5, 1000, 7}, {40, 770, 40}};
    struct scaling {
        float alpha, beta;
    };
    const scaling scalings[] = {{1.0f, 0.0f}, {0.5f, -2.0f}, {-1.5f, 1.0f}};
    std::mt19937_64 generator(3);
    std::size_t checked = 0, apart_from_float = 0;
    for (const bf16_engine engine : engines) {
        CAPTURE(petra::kernels::bf16_engine_name(engine));
        for (const product& p : products) {
            for (int variant = 0; variant < 4; ++variant) {
                const transpose op_a = variant & 1 ? transpose::yes : transpose::no;
                const transpose op_b = variant & 2 ? transpose::yes : transpose::no;
                const scaling s = scalings[(checked / 4) % 3];
                const std::size_t padding = variant == 3 ? 3 : 0;
                CAPTURE(p.m);
                CAPTURE(p.n);
                CAPTURE(p.k);
                CAPTURE(variant);
                CAPTURE(s.alpha);
                CAPTURE(s.beta);
                const std::size_t lda = (op_a == transpose::no ? p.k : p.m) + padding;
                const std::size_t ldb = (op_b == transpose::no ? p.n : p.k) + padding;
                const std::size_t ldc = p.n + padding;
                const auto a = petra::test::random_vector<float>((op_a == transpose::no ? p.m : p.k) * lda, generator);
                const auto b = petra::test::random_vector<float>((op_b == transpose::no ? p.k : p.n) * ldb, generator);
                // With beta == 0, C starts as NaN: it must be neither read nor left unwritten.
                const auto start = s.beta == 0.0f ? petra::test::nan_vector<float>(p.m * ldc)
                                                  : petra::test::random_vector<float>(p.m * ldc, generator);
                auto actual = start, expected = start, in_float = start;
                const auto arguments = [&](float* c) {
                    return petra::kernels::gemm_arguments<float>{.op_a = op_a,
                                                                 .op_b = op_b,
                                                                 .m = p.m,
                                                                 .n = p.n,
                                                                 .k = p.k,
                                                                 .alpha = s.alpha,
                                                                 .a = a.data(),
                                                                 .lda = lda,
                                                                 .b = b.data(),
                                                                 .ldb = ldb,
                                                                 .beta = s.beta,
                                                                 .c = c,
                                                                 .ldc = ldc};
                };
                petra::kernels::gemm_bf16(arguments(actual.data()), engine);
                const std::vector<double> magnitudes = petra::reference::gemm_bf16(arguments(expected.data()));
                petra::reference::gemm<float>(arguments(in_float.data()));
                bool all_close = true;
                for (std::size_t i = 0; i < p.m; ++i) {
                    for (std::size_t j = 0; j < p.n; ++j) {
                        const std::size_t at = i * ldc + j;
                        // Float accumulation over k terms, the scaling and the addition of beta * C.
                        const double tolerance = double(p.k + 8) * 0x1p-23 * magnitudes[at] +
                                                 0x1p-22 * (std::fabs(double(expected[at])) + 1e-30);
                        const double error = std::fabs(double(actual[at]) - double(expected[at]));
                        all_close = all_close && error <= tolerance;
                        if (std::fabs(double(in_float[at]) - double(expected[at])) > tolerance) ++apart_from_float;
                    }
                }
                CHECK(all_close);
                ++checked;
            }
        }
    }
    if (!engines.empty()) {
        // The tolerance tells bf16 from float: most results of the
        // unrounded operands lie outside it.
        CHECK(apart_from_float > 0);
        CHECK(checked == engines.size() * std::size(products) * 4);
    }
}

TEST_CASE("gemm_bf16 with k == 0 or alpha == 0 scales C and reads neither operand")
{
    for (const bf16_engine engine : offered_engines()) {
        std::vector<float> c = {1.0f, -2.0f, 3.0f, 4.0f};
        petra::kernels::gemm_bf16({.op_a = transpose::no,
                                   .op_b = transpose::no,
                                   .m = 2,
                                   .n = 2,
                                   .k = 0,
                                   .alpha = 1.0f,
                                   .a = nullptr,
                                   .lda = 1,
                                   .b = nullptr,
                                   .ldb = 2,
                                   .beta = 0.5f,
                                   .c = c.data(),
                                   .ldc = 2},
                                  engine);
        CHECK(c == std::vector<float>{0.5f, -1.0f, 1.5f, 2.0f});
        petra::kernels::gemm_bf16({.op_a = transpose::no,
                                   .op_b = transpose::no,
                                   .m = 2,
                                   .n = 2,
                                   .k = 3,
                                   .alpha = 0.0f,
                                   .a = nullptr,
                                   .lda = 3,
                                   .b = nullptr,
                                   .ldb = 2,
                                   .beta = 0.0f,
                                   .c = c.data(),
                                   .ldc = 2},
                                  engine);
        CHECK(c == std::vector<float>(4, 0.0f));
    }
}

TEST_CASE("gemm_bf16 takes its packed operands from a caller's region of gemm_bf16_scratch's size")
{
    const std::vector<bf16_engine> engines = offered_engines();
    if (engines.empty()) return;
    std::mt19937_64 generator(5);
    const std::size_t m = 20, n = 900, k = 50;
    const auto a = petra::test::random_vector<float>(m * k, generator);
    const auto b = petra::test::random_vector<float>(k * n, generator);
    std::vector<float> in_region(m * n), per_thread(m * n);
    const auto arguments = [&](float* c) {
        return petra::kernels::gemm_arguments<float>{.op_a = transpose::no,
                                                     .op_b = transpose::no,
                                                     .m = m,
                                                     .n = n,
                                                     .k = k,
                                                     .alpha = 1.0f,
                                                     .a = a.data(),
                                                     .lda = k,
                                                     .b = b.data(),
                                                     .ldb = n,
                                                     .beta = 0.0f,
                                                     .c = c,
                                                     .ldc = n};
    };
    const std::size_t bytes = petra::kernels::gemm_bf16_scratch(m, n, k).region_bytes();
    std::vector<std::byte> storage(bytes + 64);
    std::byte* start = storage.data() + (64 - reinterpret_cast<std::uintptr_t>(storage.data()) % 64) % 64;
    petra::kernels::gemm_bf16(arguments(in_region.data()), engines.front(), std::span<std::byte>(start, bytes));
    petra::kernels::gemm_bf16(arguments(per_thread.data()), engines.front());
    CHECK(in_region == per_thread);
    CHECK_THROWS_AS(petra::kernels::gemm_bf16(arguments(in_region.data()), engines.front(),
                                              std::span<std::byte>(start, bytes - 64)),
                    std::invalid_argument);
}

TEST_CASE("gemm_bf16 refuses an engine this CPU does not offer, naming its instruction")
{
    float c = 0.0f;
    const petra::kernels::gemm_arguments<float> arguments{.op_a = transpose::no,
                                                          .op_b = transpose::no,
                                                          .m = 1,
                                                          .n = 1,
                                                          .k = 1,
                                                          .alpha = 1.0f,
                                                          .a = &c,
                                                          .lda = 1,
                                                          .b = &c,
                                                          .ldb = 1,
                                                          .beta = 0.0f,
                                                          .c = &c,
                                                          .ldc = 1};
    const auto& support = petra::kernels::bf16_support();
    if (!support.amx) {
        CHECK_THROWS_WITH_AS(petra::kernels::gemm_bf16(arguments, bf16_engine::amx), doctest::Contains("tdpbf16ps"),
                             std::invalid_argument);
    }
    if (!support.avx512_bf16) {
        CHECK_THROWS_WITH_AS(petra::kernels::gemm_bf16(arguments, bf16_engine::avx512_bf16),
                             doctest::Contains("vdpbf16ps"), std::invalid_argument);
    }
    if (!support.amx && !support.avx512_bf16) {
        CHECK_THROWS_WITH_AS(petra::kernels::best_bf16_engine(), doctest::Contains("neither"), std::invalid_argument);
    } else {
        CHECK(petra::kernels::best_bf16_engine() == (support.amx ? bf16_engine::amx : bf16_engine::avx512_bf16));
    }
}
