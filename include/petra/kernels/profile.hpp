// Opt-in profiling of the kernel floor: where a training step's time goes,
// kernel by kernel, with the FLOPs and bytes each kernel moves.
//
// Off by default, and then free: PETRA_PROFILE_KERNEL(...) expands to
// nothing that is evaluated, so every kernel compiles to the code it had
// without this header. Defined before petra is included (for a whole
// program: every translation unit that includes petra must agree, or the
// kernels' inline definitions differ between them), PETRA_PROFILE_KERNELS
// turns every public kernel entry point into a scoped timer that adds, on
// leaving the kernel, one call, its elapsed nanoseconds, its FLOPs and its
// bytes moved to the calling thread's table (profile::this_thread()).
//
// Records are keyed by a kind, a static label naming the kernel
// ("convolution forward", "channel_affine", "add"), and by the sizes that
// describe the call (for a convolution: kernel, stride, channels in and out,
// input height and width), shown through the kind's geometry format. Kernels
// know nothing of layers; a caller that does maps kinds and sizes to its
// layers (bench/breakdown.cpp does so for the reference network).
//
// Counting contract, per call of a public entry point:
// - nanoseconds: steady_clock time from entry to exit;
// - flops: the kernel's arithmetic, a multiply-add counted as two (a
//   convolution counts convolution_shape::flops(), each kernel's comment at
//   its hook says what it counts);
// - bytes: the bytes of its array arguments read and written, each counted
//   once per pass the kernel makes over it (so a two-pass variance reads its
//   input twice); scratch copies made inside a kernel are not counted.
// Only the outermost profiled call on a thread records: a kernel that calls
// another public kernel is counted once, with its own figures.
//
// Example: with the macro defined, add(n, x, y, out) called three times with
// n = 100 in float leaves one record {kind "add", calls 3, flops 300, bytes
// 3600}.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace petra::kernels::profile {

// Whether this program was compiled with the kernels' hooks.
#if defined(PETRA_PROFILE_KERNELS)
inline constexpr bool enabled = true;
#else
inline constexpr bool enabled = false;
#endif

// Up to eight sizes that describe a call; unused ones are 0.
using sizes = std::array<std::size_t, 8>;

// What every call of one kind with the same sizes did.
struct record {
    const char* kind;            // static label of the kernel
    const char* geometry_format; // printf format taking the sizes, as %zu, in order
    profile::sizes sizes;
    std::uint64_t calls = 0;
    std::uint64_t nanoseconds = 0;
    double flops = 0;
    double bytes = 0;

    // The sizes through geometry_format, e.g. "3x3 s1, 16 -> 16 channels, 28x28".
    std::string geometry() const
    {
        char text[96];
        std::snprintf(text, sizeof text, geometry_format, sizes[0], sizes[1], sizes[2], sizes[3], sizes[4], sizes[5],
                      sizes[6], sizes[7]);
        return text;
    }
};

// The records of one thread, in the order their keys first appeared.
class table {
public:
    // Adds the calls, nanoseconds, FLOPs and bytes of totals to the record
    // keyed by its kind, geometry format and sizes (a new one if none is).
    void add(const record& totals)
    {
        record& entry = find(totals.kind, totals.geometry_format, totals.sizes);
        entry.calls += totals.calls;
        entry.nanoseconds += totals.nanoseconds;
        entry.flops += totals.flops;
        entry.bytes += totals.bytes;
    }

    // Adds every record of other to this table.
    void add(const table& other)
    {
        for (const record& r : other.records_) add(r);
    }

    const std::vector<record>& records() const { return records_; }
    void clear() { records_.clear(); }

    std::uint64_t total_nanoseconds() const
    {
        std::uint64_t total = 0;
        for (const record& r : records_) total += r.nanoseconds;
        return total;
    }

private:
    // Kinds and formats are static strings, compared by address first; by
    // content when the addresses differ, in case one literal is stored twice
    // in a program.
    record& find(const char* kind, const char* geometry_format, const profile::sizes& sizes)
    {
        auto same = [](const char* a, const char* b) { return a == b || std::strcmp(a, b) == 0; };
        for (record& r : records_) {
            if (r.sizes == sizes && same(r.kind, kind) && same(r.geometry_format, geometry_format)) return r;
        }
        records_.push_back(record{kind, geometry_format, sizes});
        return records_.back();
    }

    std::vector<record> records_;
};

// The calling thread's table, which the hooks fill.
inline table& this_thread()
{
    thread_local table instance;
    return instance;
}

// The timer a hook opens: records into this_thread() when it closes, unless
// a profiled kernel further out on this thread is still open.
class scope {
public:
    scope(const char* kind, const char* geometry_format, const profile::sizes& sizes, double flops, double bytes)
        : kind_(kind), geometry_format_(geometry_format), sizes_(sizes), flops_(flops), bytes_(bytes),
          outermost_(depth()++ == 0), start_(clock::now())
    {}
    scope(const scope&) = delete;
    scope& operator=(const scope&) = delete;
    ~scope()
    {
        const auto elapsed = clock::now() - start_;
        if (--depth() != 0 || !outermost_) return;
        const auto nanoseconds = std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count();
        this_thread().add(record{.kind = kind_,
                                 .geometry_format = geometry_format_,
                                 .sizes = sizes_,
                                 .calls = 1,
                                 .nanoseconds = static_cast<std::uint64_t>(nanoseconds),
                                 .flops = flops_,
                                 .bytes = bytes_});
    }

private:
    using clock = std::chrono::steady_clock;
    static std::size_t& depth()
    {
        thread_local std::size_t open = 0;
        return open;
    }

    const char* kind_;
    const char* geometry_format_;
    profile::sizes sizes_;
    double flops_;
    double bytes_;
    bool outermost_;
    clock::time_point start_;
};

} // namespace petra::kernels::profile

// PETRA_PROFILE_KERNEL(kind, geometry_format, {sizes...}, flops, bytes): at
// the top of a kernel entry point, times the rest of the function. Without
// PETRA_PROFILE_KERNELS its arguments are not evaluated and it generates no
// code.
#if defined(PETRA_PROFILE_KERNELS)
#define PETRA_PROFILE_KERNEL(...) const ::petra::kernels::profile::scope petra_kernel_profile_scope_(__VA_ARGS__)
#else
#define PETRA_PROFILE_KERNEL(...) static_cast<void>(0)
#endif
