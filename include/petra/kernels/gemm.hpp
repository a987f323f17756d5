// General matrix multiplication, C = alpha * op(A) * op(B) + beta * C, on
// row-major matrices, and the packed engine under it that convolutions reuse
// with packers of their own.
//
// The engine follows the classical layered design: the operands are copied
// ("packed") into contiguous slivers that a register-blocked micro-kernel
// streams through, and the loops around it are blocked so that one sliver of
// A stays in L1, one block of B in L2 and one panel of A in L3.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

#include <petra/error.hpp>
#include <petra/kernels/profile.hpp>
#include <petra/kernels/scratch.hpp>
#include <petra/kernels/simd.hpp>

namespace petra::kernels {

enum class transpose : bool { no = false, yes = true };

// Register and cache blocking for value type T on the build's instruction set.
// mr rows of A times nr columns of B are accumulated in registers; the sizes
// below were chosen by the GEMM benchmark (bench/kernels.cpp).
template <class T>
struct gemm_blocking {
    static constexpr bool wide_register_file = std::is_base_of_v<xsimd::avx512f, xsimd::default_arch>;
    // Vectors of C per micro-kernel row, and rows per micro-kernel: with 32
    // vector registers an 8 x 3 tile (24 accumulators) leaves room for the
    // three B vectors and the broadcast; with 16 registers a 6 x 2 tile does.
    // On AVX-512, 8 x 3, 12 x 2 and 6 x 4 measured within noise of each other
    // from 256 to 1024; 8 rows divide the channel counts of convolutions.
    static constexpr std::size_t vectors_per_row = wide_register_file ? 3 : 2;
    static constexpr std::size_t mr = wide_register_file ? 8 : 6;
    static constexpr std::size_t nr = vectors_per_row * simd_width<T>;
    // Depth of one packed block: an A sliver (mr x kc) stays in L1.
    static constexpr std::size_t kc = 384 * 4 / sizeof(T);
    // Columns of one packed B block (kc x nc), sized to stay in L2.
    static constexpr std::size_t nc = nr * (wide_register_file ? 10 : 20);
    // Rows of one packed A panel (mc x kc), sized for the last-level cache.
    static constexpr std::size_t mc = mr * (3072 / mr);
};

namespace detail {

// Packs lanes x depth elements of a strided operand into ceil(lanes / W)
// consecutive slivers of depth x W, element (lane, d) going to sliver lane / W
// at d * W + lane % W. Element (lane, d) of the source is
// source[lane * lane_stride + d * depth_stride]. Lanes past `lanes` are zero:
// the micro-kernel computes whole tiles and their results are never stored,
// but zeros keep NaN and slow denormal garbage out of its registers.
template <std::size_t W, class T>
void pack_slivers(const T* source, std::size_t lane_stride, std::size_t depth_stride, std::size_t lanes,
                  std::size_t depth, T* destination)
{
    for (std::size_t first = 0; first < lanes; first += W) {
        const std::size_t width = std::min(W, lanes - first);
        const T* sliver_source = source + first * lane_stride;
        if (width == W && lane_stride == 1) {
            // Rows of the sliver are contiguous in the source: fixed-size
            // copies, which compile to full-width vector moves.
            for (std::size_t d = 0; d < depth; ++d) {
                std::memcpy(destination + d * W, sliver_source + d * depth_stride, W * sizeof(T));
            }
        } else if (width == W) {
            // A transposition: walk the depth in the outer loop so that the
            // stores are contiguous and the W source streams advance together.
            for (std::size_t d = 0; d < depth; ++d) {
                const T* column = sliver_source + d * depth_stride;
                T* out = destination + d * W;
                PETRA_UNROLL(16)
                for (std::size_t lane = 0; lane < W; ++lane) out[lane] = column[lane * lane_stride];
            }
        } else {
            for (std::size_t d = 0; d < depth; ++d) {
                const T* column = sliver_source + d * depth_stride;
                T* out = destination + d * W;
                std::size_t lane = 0;
                for (; lane < width; ++lane) out[lane] = column[lane * lane_stride];
                for (; lane < W; ++lane) out[lane] = T(0);
            }
        }
        destination += depth * W;
    }
}

// Where the micro-kernel finds row d of its B operand: in a packed sliver
// (row d at sliver + d * nr, aligned), or in place in a caller's buffer (row
// d at source + offsets[d], any alignment; see convolution.hpp).
template <class T, std::size_t NR>
struct packed_rows {
    static constexpr bool aligned = true;
    const T* sliver;

    const T* operator()(std::size_t d) const { return sliver + d * NR; }
};

template <class T>
struct offset_rows {
    static constexpr bool aligned = false;
    const T* source;
    const std::size_t* offsets;

    const T* operator()(std::size_t d) const { return source + offsets[d]; }
};

// tile[mr][nr] = sum over d < kc of a_sliver (kc x mr, packed) times row d of
// B (nr wide, from b_rows), for the first UsedVectors vectors of each tile row
// only: a sliver at the right edge of B runs the narrower kernel instead of
// multiplying its zero padding. The A sliver and the tile are
// buffer_alignment-aligned.
template <class T, std::size_t MR, std::size_t VectorsPerRow, std::size_t UsedVectors, class Rows>
inline void micro_kernel(std::size_t kc, const T* __restrict a_sliver, const Rows& b_rows, T* __restrict tile)
{
    using vector = simd<T>;
    constexpr std::size_t width = vector::size;
    constexpr std::size_t nr = VectorsPerRow * width;
    vector accumulator[MR][UsedVectors];
    PETRA_UNROLL(16)
    for (std::size_t r = 0; r < MR; ++r) {
        PETRA_UNROLL(4)
        for (std::size_t v = 0; v < UsedVectors; ++v) accumulator[r][v] = vector(T(0));
    }
    for (std::size_t d = 0; d < kc; ++d) {
        const T* __restrict row = b_rows(d);
        vector b[UsedVectors];
        PETRA_UNROLL(4)
        for (std::size_t v = 0; v < UsedVectors; ++v) {
            if constexpr (Rows::aligned) {
                b[v] = vector::load_aligned(row + v * width);
            } else {
                b[v] = vector::load_unaligned(row + v * width);
            }
        }
        PETRA_UNROLL(16)
        for (std::size_t r = 0; r < MR; ++r) {
            const vector a(a_sliver[r]);
            PETRA_UNROLL(4)
            for (std::size_t v = 0; v < UsedVectors; ++v) {
                accumulator[r][v] = fused_multiply_add(a, b[v], accumulator[r][v]);
            }
        }
        a_sliver += MR;
    }
    PETRA_UNROLL(16)
    for (std::size_t r = 0; r < MR; ++r) {
        PETRA_UNROLL(4)
        for (std::size_t v = 0; v < UsedVectors; ++v) {
            accumulator[r][v].store_aligned(tile + r * nr + v * width);
        }
    }
}

// Runs the micro-kernel with as many vectors per row as `columns` needs.
template <class T, std::size_t MR, std::size_t VectorsPerRow, class Rows>
inline void micro_kernel_for_columns(std::size_t columns, std::size_t kc, const T* a_sliver, const Rows& b_rows,
                                     T* tile)
{
    constexpr std::size_t width = simd_width<T>;
    const std::size_t vectors = (columns + width - 1) / width;
    ([&]<std::size_t... Used>(std::index_sequence<Used...>) {
        // Exactly one alternative matches: the one with Used + 1 == vectors.
        ((vectors == Used + 1 ? micro_kernel<T, MR, VectorsPerRow, Used + 1>(kc, a_sliver, b_rows, tile) : void()),
         ...);
    })(std::make_index_sequence<VectorsPerRow>{});
}

struct gemm_packed_a_tag {};
struct gemm_packed_b_tag {};

// The packed blocks of packed_gemm for an m x n result of depth k: at most
// one panel of A (mc x kc) and one block of B (kc x nc), each cut to the
// problem's size.
template <class T>
constexpr std::size_t packed_a_count(std::size_t m, std::size_t k)
{
    using blocking = gemm_blocking<T>;
    return std::min(blocking::mc, (m + blocking::mr - 1) / blocking::mr * blocking::mr) * std::min(blocking::kc, k);
}
template <class T>
constexpr std::size_t packed_b_count(std::size_t n, std::size_t k)
{
    using blocking = gemm_blocking<T>;
    return std::min(blocking::nc, (n + blocking::nr - 1) / blocking::nr * blocking::nr) * std::min(blocking::kc, k);
}

} // namespace detail

// The scratch packed_gemm (and gemm) takes for an m x n result of depth k
// (scratch.hpp): nothing when the product is empty.
template <class T>
constexpr scratch_demand gemm_scratch(std::size_t m, std::size_t n, std::size_t k)
{
    scratch_demand demand;
    if (m == 0 || n == 0 || k == 0) return demand;
    demand.template ask<detail::gemm_packed_a_tag, T>(detail::packed_a_count<T>(m, k));
    demand.template ask<detail::gemm_packed_b_tag, T>(detail::packed_b_count<T>(n, k));
    return demand;
}

// The sizes of a product: op(A) is m x k, op(B) is k x n, the result m x n.
struct gemm_shape {
    std::size_t m;
    std::size_t n;
    std::size_t k;
};

// The packed engine. Computes, for an m x n result and depth k (shape.m,
// shape.n, shape.k), the products of op(A) and op(B) block by block and hands
// every mr x nr tile to `store`.
//
//   pack_a(i0, rows, d0, depth, destination): packs op(A)[i0 .. i0+rows) x
//       [d0 .. d0+depth) as detail::pack_slivers<mr> lays it out.
//   pack_b(d0, depth, j0, columns, destination): packs op(B)[d0 .. d0+depth)
//       x [j0 .. j0+columns) as detail::pack_slivers<nr> lays it out.
//   store(i0, j0, rows, columns, tile, first): tile (row stride nr) holds the
//       partial product over one depth block for result rows [i0, i0+rows)
//       and columns [j0, j0+columns); `first` is true for the first depth
//       block of that tile and false for the ones that follow, so that a
//       store can overwrite, then accumulate.
//
// The packed blocks come from `scratch` (scratch.hpp; gemm_scratch states
// their size), per-thread buffers by default.
//
// Precondition: shape.k > 0 (with k == 0 no tile is produced).
template <class T, class PackA, class PackB, class Store>
void packed_gemm(const gemm_shape& shape, PackA&& pack_a, PackB&& pack_b, Store&& store, scratch_source& scratch)
{
    using blocking = gemm_blocking<T>;
    const std::size_t m = shape.m, n = shape.n, k = shape.k;
    constexpr std::size_t mr = blocking::mr;
    constexpr std::size_t nr = blocking::nr;
    T* packed_a = scratch.take<detail::gemm_packed_a_tag, T>(detail::packed_a_count<T>(m, k));
    T* packed_b = scratch.take<detail::gemm_packed_b_tag, T>(detail::packed_b_count<T>(n, k));
    alignas(buffer_alignment) T tile[mr * nr];

    for (std::size_t ic = 0; ic < m; ic += blocking::mc) {
        const std::size_t mc = std::min(blocking::mc, m - ic);
        for (std::size_t dc = 0; dc < k; dc += blocking::kc) {
            const std::size_t kc = std::min(blocking::kc, k - dc);
            const bool first = dc == 0;
            pack_a(ic, mc, dc, kc, packed_a);
            for (std::size_t jc = 0; jc < n; jc += blocking::nc) {
                const std::size_t nc = std::min(blocking::nc, n - jc);
                pack_b(dc, kc, jc, nc, packed_b);
                for (std::size_t ir = 0; ir < mc; ir += mr) {
                    const std::size_t rows = std::min(mr, mc - ir);
                    for (std::size_t jr = 0; jr < nc; jr += nr) {
                        const std::size_t columns = std::min(nr, nc - jr);
                        detail::micro_kernel_for_columns<T, mr, blocking::vectors_per_row>(
                            columns, kc, packed_a + ir * kc, detail::packed_rows<T, nr>{packed_b + jr * kc}, tile);
                        store(ic + ir, jc + jr, rows, columns, static_cast<const T*>(tile), first);
                    }
                }
            }
        }
    }
}

template <class T, class PackA, class PackB, class Store>
void packed_gemm(const gemm_shape& shape, PackA&& pack_a, PackB&& pack_b, Store&& store)
{
    scratch_source per_thread;
    packed_gemm<T>(shape, pack_a, pack_b, store, per_thread);
}

// Strides of op(M) for a plain row-major matrix M with leading dimension ld.
struct matrix_strides {
    std::size_t row;    // between consecutive rows of op(M)
    std::size_t column; // between consecutive columns of op(M)

    constexpr matrix_strides(std::size_t ld, transpose op)
        : row(op == transpose::no ? ld : 1), column(op == transpose::no ? 1 : ld)
    {}
};

// Packs op(A) of a plain matrix as the A operand of packed_gemm: lanes are
// rows of op(A), depth runs along its columns.
template <class T>
struct matrix_a_packer {
    const T* data;
    matrix_strides strides;

    void operator()(std::size_t i0, std::size_t rows, std::size_t d0, std::size_t depth, T* destination) const
    {
        detail::pack_slivers<gemm_blocking<T>::mr>(data + i0 * strides.row + d0 * strides.column, strides.row,
                                                   strides.column, rows, depth, destination);
    }
};

// Packs op(B) of a plain matrix as the B operand of packed_gemm: depth runs
// along the rows of op(B), lanes along its columns.
template <class T>
struct matrix_b_packer {
    const T* data;
    matrix_strides strides;

    void operator()(std::size_t d0, std::size_t depth, std::size_t j0, std::size_t columns, T* destination) const
    {
        detail::pack_slivers<gemm_blocking<T>::nr>(data + d0 * strides.row + j0 * strides.column, strides.column,
                                                   strides.row, columns, depth, destination);
    }
};

// C[rows x columns] = alpha * tile + beta * C on the first depth block, and
// C += alpha * tile on the others. With beta == 0, C is never read, so it may
// hold anything (NaN included) on entry, as in BLAS.
template <class T>
struct matrix_store {
    T* c;
    std::size_t ldc;
    T alpha;
    T beta;

    void operator()(std::size_t i0, std::size_t j0, std::size_t rows, std::size_t columns, const T* tile,
                    bool first) const
    {
        using vector = simd<T>;
        constexpr std::size_t width = vector::size;
        constexpr std::size_t nr = gemm_blocking<T>::nr;
        const T scale = first ? beta : T(1);
        const vector alpha_v(alpha), scale_v(scale);
        for (std::size_t r = 0; r < rows; ++r) {
            T* out = c + (i0 + r) * ldc + j0;
            const T* in = tile + r * nr;
            std::size_t j = 0;
            if (scale == T(0)) {
                for (; j < columns - columns % width; j += width) {
                    (alpha_v * vector::load_aligned(in + j)).store_unaligned(out + j);
                }
                for (; j < columns; ++j) out[j] = alpha * in[j];
            } else {
                for (; j < columns - columns % width; j += width) {
                    // xsimd::fma, not fused_multiply_add: an addend that is a product (simd.hpp).
                    xsimd::fma(alpha_v, vector::load_aligned(in + j), scale_v * vector::load_unaligned(out + j))
                        .store_unaligned(out + j);
                }
                for (; j < columns; ++j) out[j] = alpha * in[j] + scale * out[j];
            }
        }
    }
};

namespace detail {
inline void require(bool condition, const char* what)
{
    if (!condition) raise_error(error_kind::invalid_argument, std::string("petra::kernels::gemm: ") + what);
}
} // namespace detail

// The arguments of gemm, in BLAS order; designated initialisers name them
// at the call site:
//   gemm<float>({.op_a = transpose::no, .op_b = transpose::yes, .m = m, .n = n, .k = k, .alpha = 1.0f,
//                .a = x, .lda = k, .b = w, .ldb = k, .beta = 0.0f, .c = y, .ldc = n});
template <class T>
struct gemm_arguments {
    transpose op_a;
    transpose op_b;
    std::size_t m; // rows of op(A) and of C
    std::size_t n; // columns of op(B) and of C
    std::size_t k; // columns of op(A), rows of op(B)
    T alpha;
    const T* a;
    std::size_t lda;
    const T* b;
    std::size_t ldb;
    T beta;
    T* c;
    std::size_t ldc;
};

// C = alpha * op(A) * op(B) + beta * C, all matrices row-major.
//   op(A) is m x k: A is m x k (lda >= k) when op_a == no, k x m (lda >= m) when yes.
//   op(B) is k x n: B is k x n (ldb >= n) when op_b == no, n x k (ldb >= k) when yes.
//   C is m x n with ldc >= n.
// With beta == 0, C is not read on entry. With k == 0 or alpha == 0, A and B
// are not read and C becomes beta * C. Throws std::invalid_argument when a
// leading dimension is too small or a pointer is null while needed. The
// packed operands live in `scratch`: per-thread buffers when it is empty,
// otherwise the caller's region of gemm_scratch<T>(m, n, k).region_bytes()
// bytes or more (scratch.hpp), and then nothing is allocated.
template <class T>
void gemm(const gemm_arguments<T>& arguments, std::span<std::byte> scratch = {})
{
    static_assert(std::is_floating_point_v<T>, "gemm is defined for float and double");
    const transpose op_a = arguments.op_a, op_b = arguments.op_b;
    const std::size_t m = arguments.m, n = arguments.n, k = arguments.k;
    const std::size_t lda = arguments.lda, ldb = arguments.ldb, ldc = arguments.ldc;
    const T alpha = arguments.alpha, beta = arguments.beta;
    const T* a = arguments.a;
    const T* b = arguments.b;
    T* c = arguments.c;
    // 2 m n k FLOPs; A and B read once, C written (and read when beta != 0).
    PETRA_PROFILE_KERNEL(op_a == transpose::no ? (op_b == transpose::no ? "gemm nn" : "gemm nt")
                                               : (op_b == transpose::no ? "gemm tn" : "gemm tt"),
                         "%zu x %zu x %zu", {m, n, k}, 2.0 * double(m) * double(n) * double(k),
                         double((m * k + k * n + m * n * (beta == T(0) ? 1 : 2)) * sizeof(T)));
    if (m == 0 || n == 0) return;
    detail::require(c != nullptr, "C is null");
    detail::require(ldc >= n, "ldc is smaller than the number of columns of C");
    if (k == 0 || alpha == T(0)) {
        for (std::size_t i = 0; i < m; ++i) {
            T* row = c + i * ldc;
            for (std::size_t j = 0; j < n; ++j) row[j] = beta == T(0) ? T(0) : beta * row[j];
        }
        return;
    }
    detail::require(a != nullptr && b != nullptr, "A or B is null");
    detail::require(lda >= (op_a == transpose::no ? k : m), "lda is smaller than the row length of A");
    detail::require(ldb >= (op_b == transpose::no ? n : k), "ldb is smaller than the row length of B");
    scratch_source source(scratch);
    packed_gemm<T>({.m = m, .n = n, .k = k}, matrix_a_packer<T>{a, matrix_strides(lda, op_a)},
                   matrix_b_packer<T>{b, matrix_strides(ldb, op_b)}, matrix_store<T>{c, ldc, alpha, beta}, source);
}

} // namespace petra::kernels
