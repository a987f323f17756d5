// The data cache sizes of the core a kernel runs on, read once at run time,
// so that blocking follows the CPU the code meets rather than the one it was
// tuned on. Kernels size their blocks from these (a Winograd group within
// half of L2, a stem's weight gradient's images likewise) and keep a
// compile-time ceiling wherever a size reaches a scratch demand, which must
// stay a constant expression (scratch.hpp).
//
// Where they come from, first found wins: the environment variable
// PETRA_CACHE_SIZES, "L1D,L2" or "L1D,L2,L3" in the units Linux writes
// ("32K,1M,32M"; without L3 none; empty is unset); Linux's description of
// cpu0's caches (/sys/devices/system/cpu/cpu0/cache/index*/{level,type,
// size}, read without the heap); on x86, CPUID's deterministic cache
// parameters (leaf 4, or 0x8000001D on AMD); otherwise the sizes of a
// current server core, fallback_cache_sizes.
// A level 1 or 2 the source does not describe keeps its fallback; a level 3
// it does not describe is taken to be absent (0).
//
// A value that is not two or three sizes is refused (raise_error) when the
// kernels first ask.
//
// No value depends on them: a block or group sized from the caches changes
// which data are in a cache when, never the order of a sum (the weight
// gradients' sums run on across groups of images; where a block is part
// of that order, its size is a constant: the direct weight gradient's row
// blocks, the batch statistics' units). The same program on the same
// inputs gives the same bits on a machine with other caches, as long as
// it is compiled for the same instructions (the vector width orders sums).
// test_cache_sizes runs every kernel that blocks by them under several
// sizes (caches_scope) and compares the bits.
#pragma once

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include <petra/error.hpp>

#if defined(__linux__)
#include <fcntl.h>
#include <unistd.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace petra::kernels {

struct cache_sizes {
    std::size_t l1_data; // bytes of one core's level-1 data cache
    std::size_t l2;      // bytes of the level-2 cache of one core (or of the core's share of it)
    std::size_t l3;      // bytes of the last-level cache, 0 where there is none
};

inline constexpr cache_sizes fallback_cache_sizes{32u << 10, 1u << 20, 32u << 20};

namespace detail {

// "48K", "2048K", "32M" or a plain count of bytes; 0 for anything else.
inline std::size_t parse_cache_size(const char* text)
{
    std::size_t value = 0;
    const char* c = text;
    if (*c < '0' || *c > '9') return 0;
    for (; *c >= '0' && *c <= '9'; ++c) value = value * 10 + std::size_t(*c - '0');
    if (*c == 'K') value <<= 10, ++c;
    else if (*c == 'M') value <<= 20, ++c;
    else if (*c == 'G') value <<= 30, ++c;
    return (*c == '\0' || *c == '\n') ? value : 0;
}

// PETRA_CACHE_SIZES' value, "L1D,L2" or "L1D,L2,L3" (each as
// parse_cache_size reads it, not 0, at most 12 characters, L1D <= L2 <=
// L3), into sizes; false for anything else.
inline bool parse_cache_sizes_variable(const char* text, cache_sizes& sizes)
{
    std::size_t parsed[3] = {0, 0, 0};
    std::size_t fields = 0;
    for (const char* field = text;;) {
        if (fields == 3) return false;
        char size[16];
        std::size_t length = 0;
        for (; field[length] != ',' && field[length] != '\0'; ++length) {
            // More than any cache ("1048576K" is 1 GiB), and a count that could wrap.
            if (length == 12) return false;
            size[length] = field[length];
        }
        size[length] = '\0';
        if ((parsed[fields++] = parse_cache_size(size)) == 0) return false;
        if (field[length] == '\0') break;
        field += length + 1; // past the comma
    }
    if (fields < 2 || parsed[0] > parsed[1] || (fields == 3 && parsed[1] > parsed[2])) return false;
    sizes = cache_sizes{parsed[0], parsed[1], parsed[2]};
    return true;
}

// The start of a small text file, null-terminated, or false. (open and
// read, not the C streams, whose buffers come from the heap: a kernel's
// first call must allocate nothing, test_heap_free_inference.)
inline bool read_line([[maybe_unused]] const char* path, [[maybe_unused]] char (&line)[32])
{
#if defined(__linux__)
    const int file = ::open(path, O_RDONLY | O_CLOEXEC);
    if (file < 0) return false;
    const ssize_t count = ::read(file, line, sizeof line - 1);
    ::close(file);
    if (count <= 0) return false;
    line[count] = '\0';
    return true;
#else
    return false;
#endif
}

// Records a cache of `level` holding data (type Data or Unified) of `bytes`.
inline void record_cache(cache_sizes& sizes, unsigned level, bool holds_data, std::size_t bytes)
{
    if (!holds_data || bytes == 0) return;
    if (level == 1) sizes.l1_data = bytes;
    if (level == 2) sizes.l2 = bytes;
    if (level == 3) sizes.l3 = bytes;
}

inline bool read_sysfs_caches(cache_sizes& sizes)
{
    bool found = false;
    for (unsigned index = 0; index < 16; ++index) {
        char path[96], level[32], type[32], size[32];
        const auto read = [&](const char* field, char(&line)[32]) {
            std::snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%u/%s", index, field);
            return read_line(path, line);
        };
        if (!read("level", level) || !read("type", type) || !read("size", size)) continue;
        const bool holds_data = type[0] == 'D' || type[0] == 'U'; // Data or Unified, not Instruction
        record_cache(sizes, unsigned(level[0] - '0'), holds_data, parse_cache_size(size));
        found = true;
    }
    return found;
}

inline bool read_cpuid_caches([[maybe_unused]] cache_sizes& sizes)
{
#if defined(__x86_64__) || defined(__i386__)
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid(0, &eax, &ebx, &ecx, &edx) == 0) return false;
    // "AuthenticAMD" and "HygonGenuine" describe their caches in 0x8000001D.
    const bool amd_leaf = ebx == 0x68747541 || ebx == 0x6f677948;
    const unsigned leaf = amd_leaf ? 0x8000001D : 4;
    bool found = false;
    for (unsigned index = 0; index < 16; ++index) {
        if (__get_cpuid_count(leaf, index, &eax, &ebx, &ecx, &edx) == 0) return found;
        const unsigned type = eax & 0x1f; // 0 none (the end), 1 data, 2 instruction, 3 unified
        if (type == 0) break;
        const std::size_t ways = ((ebx >> 22) & 0x3ff) + 1, partitions = ((ebx >> 12) & 0x3ff) + 1;
        const std::size_t line = (ebx & 0xfff) + 1, sets = std::size_t(ecx) + 1;
        record_cache(sizes, (eax >> 5) & 0x7, type == 1 || type == 3, ways * partitions * line * sets);
        found = true;
    }
    return found;
#else
    return false;
#endif
}

} // namespace detail

// The caches of the core that runs the program, read on the first call and
// kept (thread-safe).
inline const cache_sizes& this_core_caches()
{
    static const cache_sizes sizes = [] {
        cache_sizes described{0, 0, 0};
        if (const char* chosen = std::getenv("PETRA_CACHE_SIZES"); chosen != nullptr && *chosen != '\0') {
            if (!detail::parse_cache_sizes_variable(chosen, described)) {
                raise_error(error_kind::invalid_argument,
                            "PETRA_CACHE_SIZES=\"" + std::string(chosen) +
                                "\" is not the sizes of L1 data, L2 and optionally L3, such as 32K,1M,32M "
                                "(each at least as large as the one before).");
            }
            return described;
        }
        if (!detail::read_sysfs_caches(described) && !detail::read_cpuid_caches(described)) {
            return fallback_cache_sizes;
        }
        return cache_sizes{described.l1_data != 0 ? described.l1_data : fallback_cache_sizes.l1_data,
                           described.l2 != 0 ? described.l2 : fallback_cache_sizes.l2, described.l3};
    }();
    return sizes;
}

namespace detail {
inline const cache_sizes*& scoped_caches() noexcept
{
    thread_local const cache_sizes* sizes = nullptr;
    return sizes;
}
} // namespace detail

// The kernels on the calling thread block for `sizes` instead of the core's
// caches while the scope lives, and as before at its end; scopes nest. For
// tests (that the values do not follow the blocking) and for measuring
// blockings side by side in one program.
class caches_scope {
public:
    explicit caches_scope(const cache_sizes& sizes) noexcept : sizes_(sizes), previous_(detail::scoped_caches())
    {
        detail::scoped_caches() = &sizes_;
    }
    ~caches_scope() { detail::scoped_caches() = previous_; }
    caches_scope(const caches_scope&) = delete;
    caches_scope& operator=(const caches_scope&) = delete;

private:
    cache_sizes sizes_;
    const cache_sizes* previous_;
};

// The caches the kernels on the calling thread block for: a caches_scope's,
// else this core's (this_core_caches).
inline const cache_sizes& blocking_caches()
{
    const cache_sizes* scoped = detail::scoped_caches();
    return scoped != nullptr ? *scoped : this_core_caches();
}

// sizes as PETRA_CACHE_SIZES takes them: "48K,1M,32M" (each in the largest
// of G, M and K that divides it; no L3 where there is none).
inline std::string cache_sizes_text(const cache_sizes& sizes)
{
    const auto text = [](std::size_t bytes) {
        for (const auto& [shift, unit] : {std::pair{30, 'G'}, std::pair{20, 'M'}, std::pair{10, 'K'}}) {
            if (bytes != 0 && bytes % (std::size_t(1) << shift) == 0) {
                return std::to_string(bytes >> shift) + unit;
            }
        }
        return std::to_string(bytes);
    };
    // Appended piece by piece: g++ 12 warns falsely (-Wrestrict) on "," + std::string.
    std::string result = text(sizes.l1_data);
    result += ',';
    result += text(sizes.l2);
    if (sizes.l3 != 0) {
        result += ',';
        result += text(sizes.l3);
    }
    return result;
}

} // namespace petra::kernels
