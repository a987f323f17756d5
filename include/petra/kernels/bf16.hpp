// Matrix products in bfloat16 (bf16: a float's sign, exponent and top seven
// mantissa bits) with float accumulation, the first piece of the opt-in bf16
// precision: gemm_bf16 takes the same arguments as gemm<float>, rounds op(A)
// and op(B) to bf16 as it packs them, and sums their products in float.
//
// Two engines, chosen at run time from what the CPU and the operating system
// offer (bf16_support), so that a build for one machine runs on another:
// - avx512_bf16: vdpbf16ps (AVX512-BF16), which adds the products of two
//   pairs of bf16 values to each float lane: twice the multiply-adds of a
//   float FMA per instruction. An 8 x 48 tile of C in 24 registers, as the
//   float GEMM's.
// - amx: tdpbf16ps (AMX-BF16 and AMX-TILE), which adds a 16 x 32 by 32 x 16
//   product of bf16 tiles to a 16 x 16 float tile. A 32 x 32 block of C in
//   four tile registers.
// Elsewhere gemm_bf16 throws, naming the instruction the CPU lacks. The
// functions of an engine are compiled for its instructions whatever the
// build's -march (target attributes), and only called where they exist.
//
// Both engines read the same packed operands, rounded the same way:
//   A: op(A) row by row, m_pad x k_pad values (rows padded to 32, depth to
//      32, with zeros);
//   B: op(B) in strips of 16 columns, each strip k_pad / 2 rows of 16 pairs
//      (the values of rows 2p and 2p + 1 of one column side by side, the
//      order both instructions multiply in), 32 columns of strips at least.
// The engines sum in different orders, so their results may differ in the
// last bits: each is held to float accumulation of the rounded values
// (tests/kernels/test_bf16.cpp).
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include <petra/error.hpp>
#include <petra/kernels/gemm.hpp>
#include <petra/kernels/profile.hpp>
#include <petra/kernels/scratch.hpp>
#include <petra/kernels/simd.hpp>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define PETRA_BF16_X86 1
#include <cpuid.h>
#include <immintrin.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#endif

namespace petra::kernels {

// The bf16 value nearest to x, ties to even, as its 16 bits: NaN stays NaN
// (made quiet), infinities stay, finite values too large round to infinity,
// and values below float's normal range (denormals) become zero of their
// sign, as the conversion instructions make them (vcvtneps2bf16 reads
// denormals as zero).
constexpr std::uint16_t round_to_bf16(float x)
{
    const std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);
    if ((bits & 0x7f800000u) == 0) return static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
    return static_cast<std::uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

// The float a bf16 value stands for (exact).
constexpr float bf16_to_float(std::uint16_t value) { return std::bit_cast<float>(std::uint32_t(value) << 16); }

enum class bf16_engine {
    avx512_bf16, // vdpbf16ps
    amx,         // tdpbf16ps on AMX tiles
};

constexpr const char* bf16_engine_name(bf16_engine engine)
{
    return engine == bf16_engine::amx ? "amx" : "avx512_bf16";
}

// What this CPU and operating system offer for bf16 products: each flag
// true only where the instructions exist, the OS saves their registers and,
// for AMX, the process was granted the tile data (on Linux, a request made
// once per process by the first call to bf16_support).
struct bf16_instructions {
    bool avx512_bf16 = false;
    bool amx = false;
};

namespace detail {

#if defined(PETRA_BF16_X86)
inline std::uint64_t enabled_register_state()
{
    std::uint32_t low = 0, high = 0;
    __asm__ volatile("xgetbv" : "=a"(low), "=d"(high) : "c"(0));
    return (std::uint64_t(high) << 32) | low;
}
#endif

inline bf16_instructions probe_bf16_instructions()
{
    bf16_instructions found;
#if defined(PETRA_BF16_X86)
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0 || (ecx & (1u << 27)) == 0) return found; // no OSXSAVE
    const std::uint64_t state = enabled_register_state();
    // SSE, AVX, the mask registers and both halves of the zmm registers.
    const bool avx512_state = (state & 0xe6u) == 0xe6u;
    // AMX's tile configuration and tile data.
    const bool tile_state = (state & (3u << 17)) == (3u << 17);
    if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return found;
    // AVX512F, and the byte-and-word and vector-length extensions the
    // engines' code is compiled with (every CPU with AVX512-BF16 has them).
    const bool avx512f = (ebx & (1u << 16)) != 0 && (ebx & (1u << 30)) != 0 && (ebx & (1u << 31)) != 0;
    const bool amx_bf16 = (edx & (1u << 22)) != 0, amx_tile = (edx & (1u << 24)) != 0;
    unsigned eax1 = 0, ebx1 = 0, ecx1 = 0, edx1 = 0;
    __get_cpuid_count(7, 1, &eax1, &ebx1, &ecx1, &edx1);
    found.avx512_bf16 = avx512_state && avx512f && (eax1 & (1u << 5)) != 0;
    // The packers convert with AVX512-BF16, so AMX is taken only beside it
    // (as every CPU with AMX-BF16 has it).
    if (found.avx512_bf16 && amx_bf16 && amx_tile && tile_state) {
#if defined(__linux__)
        // ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA: without it the first
        // tile instruction of the process faults.
        constexpr long request_permission = 0x1023, tile_data = 18;
        found.amx = ::syscall(SYS_arch_prctl, request_permission, tile_data) == 0;
#endif
    }
#endif
    return found;
}

} // namespace detail

inline const bf16_instructions& bf16_support()
{
    static const bf16_instructions found = detail::probe_bf16_instructions();
    return found;
}

namespace detail {

// Throws std::invalid_argument, naming tdpbf16ps, unless AMX is offered;
// `what` names the caller, e.g. "convolution_forward_bf16".
inline void require_amx(const char* what)
{
    if (!bf16_support().amx) {
        raise_error(error_kind::invalid_argument,
                    std::string("petra::kernels::") + what +
                        " needs tdpbf16ps (AMX-BF16 and AMX-TILE, granted by the operating system), which this CPU "
                        "does not offer.");
    }
}

// Throws std::invalid_argument, naming its instruction, unless this CPU
// offers engine; `what` names the caller.
inline void require_bf16_engine(bf16_engine engine, const char* what)
{
    if (engine == bf16_engine::amx) {
        require_amx(what);
    } else if (!bf16_support().avx512_bf16) {
        raise_error(error_kind::invalid_argument, std::string("petra::kernels::") + what +
                                                      " needs vdpbf16ps (AVX512-BF16), which this CPU does not offer.");
    }
}

} // namespace detail

// The engine gemm_bf16 takes by default: AMX where it is offered, then
// AVX512-BF16; throws std::invalid_argument naming the missing instruction
// where neither is.
inline bf16_engine best_bf16_engine()
{
    const bf16_instructions& support = bf16_support();
    if (support.amx) return bf16_engine::amx;
    if (support.avx512_bf16) return bf16_engine::avx512_bf16;
    raise_error(error_kind::invalid_argument,
                "petra::kernels: bf16 precision needs the vdpbf16ps instruction (AVX512-BF16) or tdpbf16ps "
                "(AMX-BF16), and this CPU (or its operating system) offers neither.");
}

namespace detail {

struct bf16_packed_a_tag {};
struct bf16_packed_b_tag {};

// Sizes of the packed operands (see the top of this file); columns of B are
// packed nc at a time.
struct bf16_packing {
    static constexpr std::size_t row_multiple = 32;    // AMX: two tiles of 16 rows
    static constexpr std::size_t depth_multiple = 32;  // AMX: one tile's depth
    static constexpr std::size_t strip_columns = 16;   // a vector of floats, a tile's columns
    static constexpr std::size_t column_multiple = 96; // of a block of columns: 2 AMX tiles, 3 vectors
    // Columns of B per packed block: 768 columns of depth 288 (a 3x3
    // convolution over 32 channels) are 432 KiB of bf16.
    static constexpr std::size_t nc = 768;

    static constexpr std::size_t round_up(std::size_t value, std::size_t multiple)
    {
        return (value + multiple - 1) / multiple * multiple;
    }
    static constexpr std::size_t packed_a_count(std::size_t m, std::size_t k)
    {
        return round_up(m, row_multiple) * round_up(k, depth_multiple);
    }
    static constexpr std::size_t packed_b_count(std::size_t n, std::size_t k)
    {
        return std::min(nc, round_up(n, column_multiple)) * round_up(k, depth_multiple);
    }
};

// C[i][j] = alpha * tile[i][j] + beta * C[i][j] for i < rows, j < columns
// (C not read when beta == 0); tile rows are tile_stride floats apart.
inline void merge_bf16_tile(float* c, std::size_t ldc, float alpha, float beta, std::size_t rows, std::size_t columns,
                            const float* tile, std::size_t tile_stride)
{
    using vector = simd<float>;
    constexpr std::size_t width = vector::size;
    const std::size_t vector_end = columns - columns % width;
    const vector alpha_v(alpha), beta_v(beta);
    for (std::size_t i = 0; i < rows; ++i) {
        float* out = c + i * ldc;
        const float* in = tile + i * tile_stride;
        std::size_t j = 0;
        if (beta == 0.0f) {
            for (; j < vector_end; j += width) (alpha_v * vector::load_unaligned(in + j)).store_unaligned(out + j);
            for (; j < columns; ++j) out[j] = alpha * in[j];
        } else {
            for (; j < vector_end; j += width) {
                // xsimd::fma, not fused_multiply_add: an addend that is a product (simd.hpp).
                xsimd::fma(alpha_v, vector::load_unaligned(in + j), beta_v * vector::load_unaligned(out + j))
                    .store_unaligned(out + j);
            }
            for (; j < columns; ++j) out[j] = alpha * in[j] + beta * out[j];
        }
    }
}

// Packs op(A) (rows m, depth k; element (i, d) at a[i * row + d * column])
// as rows of k_pad bf16 values, m_pad rows, zeros past m and k.
inline void pack_a_bf16_scalar(const float* a, std::size_t row, std::size_t column, std::size_t m, std::size_t k,
                               std::uint16_t* packed)
{
    const std::size_t m_pad = bf16_packing::round_up(m, bf16_packing::row_multiple);
    const std::size_t k_pad = bf16_packing::round_up(k, bf16_packing::depth_multiple);
    for (std::size_t i = 0; i < m_pad; ++i) {
        std::uint16_t* out = packed + i * k_pad;
        for (std::size_t d = 0; d < k_pad; ++d) out[d] = i < m && d < k ? round_to_bf16(a[i * row + d * column]) : 0;
    }
}

// Packs columns [j0, j0 + columns) of op(B) (depth k; element (d, j) at
// b[d * row + j * column]) as strips (see the top of this file), zeros past
// the columns, the depth, and up to a whole number of column_multiple.
inline void pack_b_bf16_scalar(const float* b, std::size_t row, std::size_t column, std::size_t k, std::size_t j0,
                               std::size_t columns, std::uint16_t* packed)
{
    constexpr std::size_t width = bf16_packing::strip_columns;
    const std::size_t k_pad = bf16_packing::round_up(k, bf16_packing::depth_multiple);
    const std::size_t strips = bf16_packing::round_up(columns, bf16_packing::column_multiple) / width;
    for (std::size_t s = 0; s < strips; ++s) {
        for (std::size_t d = 0; d < k_pad; ++d) {
            std::uint16_t* out = packed + s * k_pad * width + (d / 2) * 2 * width + d % 2;
            for (std::size_t c = 0; c < width; ++c) {
                const std::size_t j = s * width + c;
                out[2 * c] = j < columns && d < k ? round_to_bf16(b[d * row + (j0 + j) * column]) : 0;
            }
        }
    }
}

#if defined(PETRA_BF16_X86)

// The instructions a function of an engine is compiled for (also the bf16
// convolution's, convolution_bf16.hpp).
#define PETRA_TARGET_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#define PETRA_TARGET_AMX __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,amx-tile,amx-bf16")))

// The shapes of the tile registers (palette 1) as ldtilecfg reads them:
// set(first, end, rows, row_bytes) gives tiles [first, end) rows of
// row_bytes bytes; the others stay empty.
struct alignas(64) amx_tile_shapes {
    std::uint8_t palette = 1;
    std::uint8_t start_row = 0;
    std::uint8_t reserved[14] = {};
    std::uint16_t bytes_per_row[16] = {};
    std::uint8_t rows[16] = {};

    constexpr amx_tile_shapes& set(std::size_t first, std::size_t end, std::size_t tile_rows, std::size_t row_bytes)
    {
        for (std::size_t tile = first; tile < end; ++tile) {
            rows[tile] = static_cast<std::uint8_t>(tile_rows);
            bytes_per_row[tile] = static_cast<std::uint16_t>(row_bytes);
        }
        return *this;
    }
};
static_assert(sizeof(amx_tile_shapes) == 64);

// The first count (<= 16) lanes.
inline __mmask16 bf16_first_lanes(std::size_t count)
{
    return static_cast<__mmask16>(count >= 16 ? 0xffffu : (1u << count) - 1u);
}

// pack_a_bf16_scalar for rows with consecutive depth (column == 1), 16
// values per conversion: the same bits (the instruction rounds as
// round_to_bf16 does).
PETRA_TARGET_AVX512_BF16 inline void pack_a_bf16_rows(const float* a, std::size_t lda, std::size_t m, std::size_t k,
                                                      std::uint16_t* packed)
{
    const std::size_t m_pad = bf16_packing::round_up(m, bf16_packing::row_multiple);
    const std::size_t k_pad = bf16_packing::round_up(k, bf16_packing::depth_multiple);
    for (std::size_t i = 0; i < m_pad; ++i) {
        std::uint16_t* out = packed + i * k_pad;
        for (std::size_t d = 0; d < k_pad; d += 16) {
            const __mmask16 mask = i < m && d < k ? bf16_first_lanes(k - d) : __mmask16(0);
            const __m512 values = _mm512_maskz_loadu_ps(mask, a + std::min(i, m - 1) * lda + std::min(d, k - 1));
            const __m256bh rounded = _mm512_cvtneps_pbh(values);
            std::memcpy(out + d, &rounded, sizeof(rounded));
        }
    }
}

// The bf16 bits of the lanes of mask at values (zero elsewhere, nothing
// else read), each in the low half of a 32-bit lane.
PETRA_TARGET_AVX512_BF16 inline __m512i bf16_row_bits(const float* values, __mmask16 mask)
{
    const __m256bh rounded = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mask, values));
    __m256i bits;
    std::memcpy(&bits, &rounded, sizeof(bits));
    // The masked forms: g++ 12 takes the others' undefined inputs for
    // uninitialised values (-Wmaybe-uninitialized).
    return _mm512_maskz_cvtepu16_epi32(__mmask16(0xffff), bits);
}

// pack_b_bf16_scalar for rows of op(B) with consecutive columns (column ==
// 1): a strip's pair of rows as two conversions and one interleaving.
PETRA_TARGET_AVX512_BF16 inline void pack_b_bf16_rows(const float* b, std::size_t ldb, std::size_t k, std::size_t j0,
                                                      std::size_t columns, std::uint16_t* packed)
{
    constexpr std::size_t width = bf16_packing::strip_columns;
    const std::size_t k_pad = bf16_packing::round_up(k, bf16_packing::depth_multiple);
    const std::size_t strips = bf16_packing::round_up(columns, bf16_packing::column_multiple) / width;
    for (std::size_t s = 0; s < strips; ++s) {
        const std::size_t first = s * width;
        const __mmask16 mask = first < columns ? bf16_first_lanes(columns - first) : __mmask16(0);
        std::uint16_t* out = packed + s * k_pad * width;
        for (std::size_t d = 0; d < k_pad; d += 2) {
            // Rows past the depth read nothing (an empty mask), and their
            // address stays within B.
            const __m512i even = bf16_row_bits(b + std::min(d, k - 1) * ldb + j0 + first, d < k ? mask : __mmask16(0));
            const __m512i odd =
                bf16_row_bits(b + std::min(d + 1, k - 1) * ldb + j0 + first, d + 1 < k ? mask : __mmask16(0));
            const __m512i pair = _mm512_or_si512(even, _mm512_maskz_slli_epi32(__mmask16(0xffff), odd, 16));
            _mm512_storeu_si512(out + d * width, pair);
        }
    }
}

// tile[r][16 v + c] = sum over the pairs p < pairs of A's rows r < 8 (at a +
// r * a_stride, pair p at 2 p) times strip v's pair p of column c, for v <
// Vectors; tile rows are 48 floats apart.
template <std::size_t Vectors>
PETRA_TARGET_AVX512_BF16 void bf16_dot_tile(std::size_t pairs, const std::uint16_t* a, std::size_t a_stride,
                                            const std::uint16_t* strips, std::size_t strip_stride, float* tile)
{
    constexpr std::size_t rows = 8, width = bf16_packing::strip_columns;
    __m512 accumulator[rows][Vectors];
    PETRA_UNROLL(8)
    for (std::size_t r = 0; r < rows; ++r) {
        PETRA_UNROLL(4)
        for (std::size_t v = 0; v < Vectors; ++v) accumulator[r][v] = _mm512_setzero_ps();
    }
    for (std::size_t p = 0; p < pairs; ++p) {
        __m512bh column_pairs[Vectors];
        PETRA_UNROLL(4)
        for (std::size_t v = 0; v < Vectors; ++v) {
            column_pairs[v] = (__m512bh)_mm512_loadu_si512(strips + v * strip_stride + p * 2 * width);
        }
        PETRA_UNROLL(8)
        for (std::size_t r = 0; r < rows; ++r) {
            std::uint32_t pair;
            std::memcpy(&pair, a + r * a_stride + 2 * p, sizeof(pair));
            const __m512bh row_pair = (__m512bh)_mm512_set1_epi32(static_cast<int>(pair));
            PETRA_UNROLL(4)
            for (std::size_t v = 0; v < Vectors; ++v) {
                accumulator[r][v] = _mm512_dpbf16_ps(accumulator[r][v], row_pair, column_pairs[v]);
            }
        }
    }
    PETRA_UNROLL(8)
    for (std::size_t r = 0; r < rows; ++r) {
        PETRA_UNROLL(4)
        for (std::size_t v = 0; v < Vectors; ++v) _mm512_storeu_ps(tile + r * 3 * width + v * width, accumulator[r][v]);
    }
}

// C's columns [j0, j0 + columns) from the packed operands, with vdpbf16ps:
// 8 rows by 3 strips at a time.
PETRA_TARGET_AVX512_BF16 inline void bf16_block_avx512(std::size_t m, std::size_t k, const std::uint16_t* packed_a,
                                                       const std::uint16_t* packed_b, std::size_t columns, float alpha,
                                                       float beta, float* c, std::size_t ldc)
{
    constexpr std::size_t width = bf16_packing::strip_columns, rows = 8;
    const std::size_t k_pad = bf16_packing::round_up(k, bf16_packing::depth_multiple);
    const std::size_t strip_stride = k_pad * width;
    alignas(64) float tile[rows * 3 * width];
    for (std::size_t j = 0; j < columns; j += 3 * width) {
        const std::size_t used = std::min(3 * width, columns - j);
        const std::size_t vectors = (used + width - 1) / width;
        const std::uint16_t* strips = packed_b + (j / width) * strip_stride;
        for (std::size_t i = 0; i < m; i += rows) {
            const std::uint16_t* a = packed_a + i * k_pad;
            if (vectors == 3) bf16_dot_tile<3>(k_pad / 2, a, k_pad, strips, strip_stride, tile);
            else if (vectors == 2) bf16_dot_tile<2>(k_pad / 2, a, k_pad, strips, strip_stride, tile);
            else bf16_dot_tile<1>(k_pad / 2, a, k_pad, strips, strip_stride, tile);
            merge_bf16_tile(c + i * ldc + j, ldc, alpha, beta, std::min(rows, m - i), used, tile, 3 * width);
        }
    }
}

// A 32 x 32 block of float results in tile registers 0 to 3 (rows 0-15 by
// columns 0-15, rows 0-15 by 16-31, rows 16-31 by 0-15, rows 16-31 by
// 16-31), as the AMX kernels keep it: zeroed, and stored to results (32
// floats per row).
PETRA_TARGET_AMX inline void zero_block_tiles()
{
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
}

PETRA_TARGET_AMX inline void store_block_tiles(float* results)
{
    constexpr std::size_t row_bytes = 32 * sizeof(float);
    _tile_stored(0, results, row_bytes);
    _tile_stored(1, results + 16, row_bytes);
    _tile_stored(2, results + 16 * 32, row_bytes);
    _tile_stored(3, results + 16 * 32 + 16, row_bytes);
}

// The same with tdpbf16ps: blocks of 32 rows by 32 columns in tile registers
// 0 to 3 (C), 4 and 5 (A's two row tiles), 6 and 7 (B's two strips), every
// tile 16 rows of 64 bytes. The tile configuration is loaded on entry and
// released on exit, so a thread holds no tile state between calls.
PETRA_TARGET_AMX inline void bf16_block_amx(std::size_t m, std::size_t k, const std::uint16_t* packed_a,
                                            const std::uint16_t* packed_b, std::size_t columns, float alpha, float beta,
                                            float* c, std::size_t ldc)
{
    constexpr std::size_t width = bf16_packing::strip_columns, block = 32;
    const std::size_t k_pad = bf16_packing::round_up(k, bf16_packing::depth_multiple);
    const std::size_t strip_stride = k_pad * width;
    const amx_tile_shapes shapes = amx_tile_shapes{}.set(0, 8, 16, 64);
    _tile_loadconfig(&shapes);
    alignas(64) float results[block * block];
    for (std::size_t j = 0; j < columns; j += block) {
        const std::uint16_t* strip = packed_b + (j / width) * strip_stride;
        for (std::size_t i = 0; i < m; i += block) {
            const std::uint16_t* a = packed_a + i * k_pad;
            zero_block_tiles();
            for (std::size_t d = 0; d < k_pad; d += bf16_packing::depth_multiple) {
                _tile_loadd(4, a + d, k_pad * sizeof(std::uint16_t));
                _tile_loadd(5, a + 16 * k_pad + d, k_pad * sizeof(std::uint16_t));
                _tile_loadd(6, strip + d * width, 2 * width * sizeof(std::uint16_t));
                _tile_loadd(7, strip + strip_stride + d * width, 2 * width * sizeof(std::uint16_t));
                _tile_dpbf16ps(0, 4, 6);
                _tile_dpbf16ps(1, 4, 7);
                _tile_dpbf16ps(2, 5, 6);
                _tile_dpbf16ps(3, 5, 7);
            }
            store_block_tiles(results);
            merge_bf16_tile(c + i * ldc + j, ldc, alpha, beta, std::min(block, m - i), std::min(block, columns - j),
                            results, block);
        }
    }
    _tile_release();
}

#endif // PETRA_BF16_X86

} // namespace detail

// The scratch gemm_bf16 takes for an m x n result of depth k (scratch.hpp):
// the packed A and one packed block of B's columns; nothing when the
// product is empty.
constexpr scratch_demand gemm_bf16_scratch(std::size_t m, std::size_t n, std::size_t k)
{
    scratch_demand demand;
    if (m == 0 || n == 0 || k == 0) return demand;
    demand.template ask<detail::bf16_packed_a_tag, std::uint16_t>(detail::bf16_packing::packed_a_count(m, k));
    demand.template ask<detail::bf16_packed_b_tag, std::uint16_t>(detail::bf16_packing::packed_b_count(n, k));
    return demand;
}

// C = alpha * op(A) * op(B) + beta * C, as gemm<float> (the same arguments,
// checks and conventions: C not read when beta == 0, A and B not read when
// k == 0 or alpha == 0), except that every value of op(A) and op(B) is
// first rounded to bf16 (round_to_bf16) and the products are summed in
// float by `engine`. Throws std::invalid_argument, naming the instruction,
// when the CPU lacks the engine's.
inline void gemm_bf16(const gemm_arguments<float>& arguments, bf16_engine engine, std::span<std::byte> scratch = {})
{
    const transpose op_a = arguments.op_a, op_b = arguments.op_b;
    const std::size_t m = arguments.m, n = arguments.n, k = arguments.k;
    const std::size_t lda = arguments.lda, ldb = arguments.ldb, ldc = arguments.ldc;
    PETRA_PROFILE_KERNEL(
        "gemm bf16", "%zu x %zu x %zu", {m, n, k}, 2.0 * double(m) * double(n) * double(k),
        double((m * k + k * n) * sizeof(float) + m * n * sizeof(float) * (arguments.beta == 0 ? 1 : 2)));
    detail::require_bf16_engine(engine, "gemm_bf16");
    if (m == 0 || n == 0) return;
    detail::require(arguments.c != nullptr, "C is null");
    detail::require(ldc >= n, "ldc is smaller than the number of columns of C");
    if (k == 0 || arguments.alpha == 0.0f) {
        for (std::size_t i = 0; i < m; ++i) {
            float* row = arguments.c + i * ldc;
            for (std::size_t j = 0; j < n; ++j) row[j] = arguments.beta == 0.0f ? 0.0f : arguments.beta * row[j];
        }
        return;
    }
    detail::require(arguments.a != nullptr && arguments.b != nullptr, "A or B is null");
    detail::require(lda >= (op_a == transpose::no ? k : m), "lda is smaller than the row length of A");
    detail::require(ldb >= (op_b == transpose::no ? n : k), "ldb is smaller than the row length of B");
#if defined(PETRA_BF16_X86)
    using packing = detail::bf16_packing;
    scratch_source source(scratch);
    std::uint16_t* packed_a = source.take<detail::bf16_packed_a_tag, std::uint16_t>(packing::packed_a_count(m, k));
    std::uint16_t* packed_b = source.take<detail::bf16_packed_b_tag, std::uint16_t>(packing::packed_b_count(n, k));
    const matrix_strides a_strides(lda, op_a), b_strides(ldb, op_b);
    if (a_strides.column == 1) detail::pack_a_bf16_rows(arguments.a, lda, m, k, packed_a);
    else detail::pack_a_bf16_scalar(arguments.a, a_strides.row, a_strides.column, m, k, packed_a);
    for (std::size_t j0 = 0; j0 < n; j0 += packing::nc) {
        const std::size_t columns = std::min(packing::nc, n - j0);
        if (b_strides.column == 1) detail::pack_b_bf16_rows(arguments.b, ldb, k, j0, columns, packed_b);
        else detail::pack_b_bf16_scalar(arguments.b, b_strides.row, b_strides.column, k, j0, columns, packed_b);
        float* c = arguments.c + j0;
        if (engine == bf16_engine::amx) {
            detail::bf16_block_amx(m, k, packed_a, packed_b, columns, arguments.alpha, arguments.beta, c, ldc);
        } else {
            detail::bf16_block_avx512(m, k, packed_a, packed_b, columns, arguments.alpha, arguments.beta, c, ldc);
        }
    }
#else
    (void)scratch;
#endif
}

// gemm_bf16 with the best engine this CPU offers (best_bf16_engine).
inline void gemm_bf16(const gemm_arguments<float>& arguments, std::span<std::byte> scratch = {})
{
    gemm_bf16(arguments, best_bf16_engine(), scratch);
}

} // namespace petra::kernels
