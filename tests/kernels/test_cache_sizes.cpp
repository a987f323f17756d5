// The cache sizes the kernels block for: the parser of the sizes Linux
// writes, the sizes of the machine the test runs on (plausible, and the same
// from both sources where both describe them), and the Winograd group budget
// drawn from them.
#include <petra/kernels/cache_sizes.hpp>
#include <petra/kernels/winograd.hpp>

#include <algorithm>
#include <cstddef>

#include <doctest/doctest.h>

namespace kernels = petra::kernels;

TEST_CASE("cache sizes as Linux writes them")
{
    CHECK(kernels::detail::parse_cache_size("32K\n") == 32u << 10);
    CHECK(kernels::detail::parse_cache_size("48K") == 48u << 10);
    CHECK(kernels::detail::parse_cache_size("2048K\n") == 2u << 20);
    CHECK(kernels::detail::parse_cache_size("32M") == 32u << 20);
    CHECK(kernels::detail::parse_cache_size("65536") == 65536);
    CHECK(kernels::detail::parse_cache_size("") == 0);
    CHECK(kernels::detail::parse_cache_size("K") == 0);
    CHECK(kernels::detail::parse_cache_size("32KB") == 0);
    CHECK(kernels::detail::parse_cache_size("-32K") == 0);
}

TEST_CASE("the caches of this core are plausible and agree between sources")
{
    const kernels::cache_sizes& caches = kernels::this_core_caches();
    MESSAGE("L1d " << (caches.l1_data >> 10) << " KiB, L2 " << (caches.l2 >> 10) << " KiB, L3 " << (caches.l3 >> 10)
                   << " KiB");
    CHECK(caches.l1_data >= (4u << 10));
    CHECK(caches.l1_data <= (1u << 20));
    CHECK(caches.l2 >= caches.l1_data);
    CHECK((caches.l3 == 0 || caches.l3 >= caches.l2));
    // Read once: the same object every time.
    CHECK(&kernels::this_core_caches() == &caches);

    kernels::cache_sizes from_linux{0, 0, 0}, from_cpuid{0, 0, 0};
    const bool linux_described = kernels::detail::read_sysfs_caches(from_linux);
    const bool cpuid_described = kernels::detail::read_cpuid_caches(from_cpuid);
    if (linux_described) {
        CHECK(caches.l1_data == from_linux.l1_data);
        CHECK(caches.l2 == from_linux.l2);
    }
    if (linux_described && cpuid_described) {
        CHECK(from_cpuid.l1_data == from_linux.l1_data);
        CHECK(from_cpuid.l2 == from_linux.l2);
    }
}

TEST_CASE("a Winograd group holds half of L2, within its bounds, and the compile-time ceiling above it")
{
    constexpr std::size_t at_compile_time = kernels::detail::winograd_group_bytes();
    static_assert(at_compile_time == kernels::detail::winograd_max_group_bytes);
    // (Not a const variable: its initializer would be evaluated as a constant.)
    std::size_t at_run_time = kernels::detail::winograd_group_bytes();
    CHECK(at_run_time == std::clamp<std::size_t>(kernels::this_core_caches().l2 / 2, std::size_t(64) << 10,
                                                 kernels::detail::winograd_max_group_bytes));
    // More bytes never choose fewer images, so the ceiling's scratch bounds a core's.
    for (const std::size_t budget : {std::size_t(64) << 10, std::size_t(256) << 10, at_run_time}) {
        const kernels::detail::winograd_geometry<float> chosen(64, 28, 28, 16, 16, 2, budget);
        const kernels::detail::winograd_geometry<float> ceiling(64, 28, 28, 16, 16, 2, at_compile_time);
        CHECK(chosen.group_images <= ceiling.group_images);
        CHECK(chosen.patches_count() <= ceiling.patches_count());
        CHECK(chosen.one_vector_rows == ceiling.one_vector_rows);
    }
}

TEST_CASE("a Winograd group's tiles are padded to rows that waste the fewest products")
{
    using geometry = kernels::detail::winograd_geometry<float>;
    using blocking = kernels::detail::winograd_blocking<float>;
    // One vector of result channels: the rows are one of the candidates.
    for (const std::size_t tile : {std::size_t(2), std::size_t(4)}) {
        for (const std::size_t side : {std::size_t(7), std::size_t(14), std::size_t(28), std::size_t(32)}) {
            CAPTURE(tile);
            CAPTURE(side);
            const geometry one(64, side, side, 16, kernels::simd_width<float>, tile);
            CHECK(std::find(blocking::one_vector_rows.begin(), blocking::one_vector_rows.end(), one.one_vector_rows) !=
                  blocking::one_vector_rows.end());
            CHECK(one.row_multiple == one.one_vector_rows);
            CHECK(one.group_tiles % one.row_multiple == 0);
            CHECK(one.group_tiles >= one.group_images * one.tiles);
        }
    }
    if constexpr (blocking::wide && kernels::simd_width<float> == 16) {
        // The reference network's 28x28 x 16-channel couplings: 49 tiles an
        // image in F(4x4, 3x3), 196 in F(2x2, 3x3); 14 rows divide both
        // groups, where 24 computed 120 rows for two images' 98 tiles.
        for (const std::size_t tile : {std::size_t(2), std::size_t(4)}) {
            CAPTURE(tile);
            const geometry reference(64, 28, 28, 16, 16, tile);
            CHECK(reference.one_vector_rows == 14);
            CHECK(reference.group_tiles == reference.group_images * reference.tiles);
        }
        // More than one vector: the blocking's rows, as before.
        const geometry wider(64, 14, 14, 32, 32, 4);
        CHECK(wider.row_multiple == blocking::rows_for(2));
    }
}
