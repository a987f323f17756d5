// The cache sizes the kernels block for: the parser of the sizes Linux
// writes and of PETRA_CACHE_SIZES, the sizes of the machine the test runs on
// (plausible, and the same from both sources where both describe them) or
// those PETRA_CACHE_SIZES gives (tests/CMakeLists.txt runs the program with
// a valid and an invalid value too), and the Winograd group budget drawn
// from them.
#include <petra/kernels/cache_sizes.hpp>
#include <petra/kernels/winograd.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <stdexcept>
#include <string>

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

TEST_CASE("PETRA_CACHE_SIZES as a user writes it")
{
    const auto parsed = [](const char* text) {
        kernels::cache_sizes sizes{1, 1, 1};
        const bool valid = kernels::detail::parse_cache_sizes_variable(text, sizes);
        return valid ? sizes : kernels::cache_sizes{0, 0, 0};
    };
    const auto is = [](const kernels::cache_sizes& sizes, std::size_t l1_data, std::size_t l2, std::size_t l3) {
        return sizes.l1_data == l1_data && sizes.l2 == l2 && sizes.l3 == l3;
    };
    CHECK(is(parsed("32K,1M,32M"), 32u << 10, 1u << 20, 32u << 20));
    CHECK(is(parsed("48K,2048K"), 48u << 10, 2u << 20, 0)); // no L3
    CHECK(is(parsed("32768,1048576,1048576"), 32768, 1u << 20, 1u << 20));
    CHECK(is(parsed("000000032768,1M"), 32768, 1u << 20, 0)); // 12 characters, the most a size has
    // cache_sizes_text writes what the variable reads.
    for (const kernels::cache_sizes sizes :
         {kernels::cache_sizes{48u << 10, 1u << 20, 32u << 20}, kernels::cache_sizes{32u << 10, 2u << 20, 0},
          kernels::cache_sizes{1000, 3u << 30, 3u << 30}, kernels::this_core_caches()}) {
        const std::string text = kernels::cache_sizes_text(sizes);
        CAPTURE(text);
        CHECK(is(parsed(text.c_str()), sizes.l1_data, sizes.l2, sizes.l3));
    }
    CHECK(kernels::cache_sizes_text({48u << 10, 1u << 20, 32u << 20}) == "48K,1M,32M");
    CHECK(kernels::cache_sizes_text({1000, 1536u << 10, 0}) == "1000,1536K");
    for (const char* refused :
         {"", "32K", "32K,", ",1M", "32K,1M,", "32K,1M,32M,64M", "32K,big", "1M,32K", "32K,2M,1M", "32K;1M", "0,1M",
          "32K,1M,0", "32K,99999999999999999999M", "0000000032768,1M", "32K,1111111111111111111111111111111111M"}) {
        CAPTURE(refused);
        CHECK(is(parsed(refused), 0, 0, 0));
    }
}

TEST_CASE("the caches of this core are plausible and agree between sources, or are those PETRA_CACHE_SIZES gives")
{
    if (const char* chosen = std::getenv("PETRA_CACHE_SIZES"); chosen != nullptr && *chosen != '\0') {
        kernels::cache_sizes given{0, 0, 0};
        if (!kernels::detail::parse_cache_sizes_variable(chosen, given)) {
            CHECK_THROWS_WITH_AS(kernels::this_core_caches(),
                                 ("PETRA_CACHE_SIZES=\"" + std::string(chosen) +
                                  "\" is not the sizes of L1 data, L2 and optionally L3, such as 32K,1M,32M (each at "
                                  "least as large as the one before).")
                                     .c_str(),
                                 std::invalid_argument);
            return;
        }
        const kernels::cache_sizes& caches = kernels::this_core_caches();
        CHECK(caches.l1_data == given.l1_data);
        CHECK(caches.l2 == given.l2);
        CHECK(caches.l3 == given.l3);
        return;
    }
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
        // groups, where 24 computed 120 rows for two images' 98 tiles. (At
        // the budgets of 1 and 2 MiB of L2, those of the machines this was
        // measured on; with less the group is one image of 49 tiles.)
        for (const std::size_t tile : {std::size_t(2), std::size_t(4)}) {
            for (const std::size_t budget : {std::size_t(512) << 10, kernels::detail::winograd_max_group_bytes}) {
                CAPTURE(tile);
                CAPTURE(budget);
                const geometry reference(64, 28, 28, 16, 16, tile, budget);
                CHECK(reference.one_vector_rows == 14);
                CHECK(reference.group_tiles == reference.group_images * reference.tiles);
            }
        }
        // More than one vector: the blocking's rows, as before.
        const geometry wider(64, 14, 14, 32, 32, 4);
        CHECK(wider.row_multiple == blocking::rows_for(2));
    }
}
