// The cache sizes the kernels block for: the parser of the sizes Linux
// writes and of PETRA_CACHE_SIZES, the sizes of the machine the test runs on
// (plausible, and the same from both sources where both describe them) or
// those PETRA_CACHE_SIZES gives (tests/CMakeLists.txt runs the program with
// a valid and an invalid value too), the Winograd group budget drawn
// from them, and that no kernel's values depend on them.
#include <petra/kernels/cache_sizes.hpp>
#include <petra/kernels/convolution.hpp>
#include <petra/kernels/convolution_bf16.hpp>
#include <petra/kernels/reduction.hpp>
#include <petra/kernels/winograd.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "support.hpp"

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

namespace {

// The outputs of one run of the kernels, to be compared bit for bit.
using outputs = std::vector<std::vector<float>>;

bool same_bits(const std::vector<float>& a, const std::vector<float>& b)
{
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Every kernel that blocks by the caches, on shapes where the blockings
// below differ: the forward with its output statistics, the input gradient
// and the weight gradient (accumulated onto weights already there).
outputs convolution_outputs(const kernels::convolution_shape& shape, bool bf16)
{
    std::mt19937_64 generator(1);
    const std::vector<float> x = petra::test::random_vector(shape.input_count(), generator, -1.0f, 2.0f);
    const std::vector<float> w = petra::test::random_vector(shape.weight_count(), generator, -1.0f, 2.0f);
    const std::vector<float> dy = petra::test::random_vector(shape.output_count(), generator, -1.0f, 2.0f);
    std::vector<float> y(shape.output_count()), dx(shape.input_count());
    std::vector<float> dw = petra::test::random_vector(shape.weight_count(), generator, -1.0f, 2.0f);
    std::vector<float> mean(shape.out_channels), variance(shape.out_channels);
    const kernels::channel_statistics<float> statistics{mean.data(), variance.data()};
    if (bf16) {
        kernels::convolution_forward_bf16(shape, x.data(), w.data(), y.data(), 0.0f, {}, {}, statistics);
        kernels::convolution_backward_input_bf16(shape, dy.data(), w.data(), dx.data());
        kernels::convolution_backward_weights_bf16(shape, x.data(), dy.data(), dw.data(), 1.0f);
    } else {
        kernels::convolution_forward(shape, x.data(), w.data(), y.data(), {}, {}, statistics);
        kernels::convolution_backward_input(shape, dy.data(), w.data(), dx.data());
        kernels::convolution_backward_weights(shape, x.data(), dy.data(), dw.data(), 1.0f);
    }
    return {y, mean, variance, dx, dw};
}

} // namespace

// Blocks and groups follow the caches (the direct weight gradient's rows
// by L1d; the stem's weight gradient, Winograd's groups and the batch
// statistics' groups by L2), the order of the sums does not: a run on a
// core with other caches gives the same bits. The sizes: a small core's
// (every L2 group one image, row blocks of a few rows), this machine's, a
// large one's (whole batches in one group, whole images in one row block).
TEST_CASE("no kernel's values depend on the caches it blocks for")
{
    const kernels::cache_sizes cores[] = {
        {16u << 10, 128u << 10, 0}, kernels::this_core_caches(), {64u << 10, 4u << 20, 64u << 20}};
    struct named_shape {
        const char* name;
        kernels::convolution_shape shape;
    };
    const named_shape shapes[] = {
        {"stem, 1 -> 32 channels", {9, 1, 28, 28, 32, 3, 1, 1}},
        {"3x3 stride 2, 16 -> 32 channels", {9, 16, 28, 28, 32, 3, 2, 1}},
        {"1x1 stride 2, 16 -> 32 channels", {9, 16, 28, 28, 32, 1, 2, 0}},
        {"3x3 stride 2, 32 -> 64 channels", {9, 32, 14, 14, 64, 3, 2, 1}},
        {"Winograd, 16 channels at 28x28", {9, 16, 28, 28, 16, 3, 1, 1}},
        {"Winograd, 32 channels at 14x14", {9, 32, 14, 14, 32, 3, 1, 1}},
        {"5 -> 7 channels at 30x30, 3x3", {5, 5, 30, 30, 7, 3, 1, 1}},
    };
    const kernels::bf16_instructions& bf16 = kernels::bf16_support();
    for (const bool in_bf16 : {false, true}) {
        if (in_bf16 && !bf16.avx512_bf16 && !bf16.amx) continue;
        for (const named_shape& shape : shapes) {
            const std::string label = std::string(shape.name) + (in_bf16 ? ", bf16" : "");
            INFO(label);
            outputs first;
            for (const kernels::cache_sizes& core : cores) {
                const std::string caches = kernels::cache_sizes_text(core);
                INFO(caches);
                const kernels::caches_scope scope(core);
                const outputs these = convolution_outputs(shape.shape, in_bf16);
                if (first.empty()) {
                    first = these;
                    continue;
                }
                const char* names[] = {"forward", "output means", "output variances", "input gradient",
                                       "weight gradient"};
                for (std::size_t i = 0; i < first.size(); ++i) {
                    const std::string output = names[i];
                    INFO(output);
                    CHECK(same_bits(these[i], first[i]));
                }
            }
        }
    }
    // The batch statistics on their own (channel_mean_variance).
    std::mt19937_64 generator(5);
    const std::vector<float> x = petra::test::random_vector(9 * 32 * 784, generator, -1.0f, 2.0f);
    std::vector<float> reference;
    for (const kernels::cache_sizes& core : cores) {
        const kernels::caches_scope scope(core);
        std::vector<float> statistics(64);
        kernels::channel_mean_variance<float>(9, 32, 784, x.data(), statistics.data(), statistics.data() + 32);
        if (reference.empty()) reference = statistics;
        CHECK(same_bits(statistics, reference));
    }
}

TEST_CASE("a caches scope gives the kernels its sizes on its thread until it ends, nested scopes included")
{
    const kernels::cache_sizes& core = kernels::this_core_caches();
    CHECK(&kernels::blocking_caches() == &core);
    {
        const kernels::caches_scope outer({16u << 10, 256u << 10, 0});
        CHECK(kernels::blocking_caches().l2 == (256u << 10));
        {
            const kernels::caches_scope inner({32u << 10, 2u << 20, 8u << 20});
            CHECK(kernels::blocking_caches().l1_data == (32u << 10));
            CHECK(kernels::blocking_caches().l2 == (2u << 20));
        }
        CHECK(kernels::blocking_caches().l2 == (256u << 10));
        CHECK(kernels::detail::winograd_group_bytes() == (128u << 10));
        CHECK(kernels::this_core_caches().l2 == core.l2); // the core's own, still
    }
    CHECK(&kernels::blocking_caches() == &core);
}
