// The precision a layer computes its products in (floor 3), as a setting of
// the calling thread, so that one network type trains in either:
//
//   {
//       const petra::precision_scope scope(petra::precision::bf16);
//       net::forward(...);   // conv2d's products in bf16, on this thread
//   }                        // the thread's previous precision is back
//
// - fp32 (every thread's default): everything in float, as the types say.
// - bf16: where a layer has bf16 kernels that are faster than its float
//   ones, their operands are rounded to bf16 and their products summed in
//   float (kernels/convolution_bf16.hpp); everything else, the values kept
//   between layers, the parameters, their gradients and the optimizer stay
//   float. Layers instantiated with T = double compute in double whatever
//   the setting. Today conv2d is the one layer with bf16 kernels, and they
//   need AMX tiles: require_precision says so before a run starts.
//
// The setting is per thread because a pipeline runs each stage on its own
// thread: the stage sets it from pipeline_options::precision around every
// forward, backward and inference it runs, and the trainers around every
// step, so that the drivers (threads, simulator, MPI ranks) compute the
// same numbers in either precision.
#pragma once

#include <string>
#include <string_view>

#include <petra/error.hpp>
#include <petra/kernels/bf16.hpp>

namespace petra {

enum class precision : unsigned char {
    fp32, // float everywhere (the default)
    bf16, // products of the layers that have bf16 kernels in bf16, summed in float
};

// "fp32" or "bf16".
constexpr const char* precision_name(precision value) { return value == precision::bf16 ? "bf16" : "fp32"; }

// The precision named "fp32" or "bf16"; std::invalid_argument naming both for
// any other text.
inline precision parse_precision(std::string_view text)
{
    if (text == "fp32") return precision::fp32;
    if (text == "bf16") return precision::bf16;
    raise_error(error_kind::invalid_argument,
                "petra: the precision \"" + std::string(text) + "\" is neither fp32 nor bf16.");
}

// Throws std::invalid_argument, naming what is missing, unless this CPU (and
// its operating system) can compute in `value`: bf16 needs vdpbf16ps
// (AVX512-BF16) or tdpbf16ps (AMX-BF16 and AMX-TILE) for conv2d's kernels.
inline void require_precision(precision value)
{
    const kernels::bf16_instructions& offered = kernels::bf16_support();
    if (value == precision::bf16 && !offered.avx512_bf16 && !offered.amx) {
        raise_error(error_kind::invalid_argument,
                    "petra: precision bf16 needs the vdpbf16ps instruction (AVX512-BF16) or tdpbf16ps (AMX-BF16 and "
                    "AMX-TILE, granted by the operating system) for its convolutions, which this CPU does not offer; "
                    "train in fp32.");
    }
}

namespace detail {
inline precision& thread_precision_setting() noexcept
{
    thread_local precision setting = precision::fp32;
    return setting;
}
} // namespace detail

// The calling thread's precision: fp32 unless a precision_scope says otherwise.
inline precision thread_precision() noexcept { return detail::thread_precision_setting(); }

// Sets the calling thread's precision for its lifetime and restores the
// previous one at its end; scopes nest. It does not check that the CPU can
// compute in that precision (require_precision does; a bf16 kernel refuses
// anyway where it cannot run).
class precision_scope {
public:
    explicit precision_scope(precision value) noexcept : previous_(detail::thread_precision_setting())
    {
        detail::thread_precision_setting() = value;
    }
    ~precision_scope() { detail::thread_precision_setting() = previous_; }
    precision_scope(const precision_scope&) = delete;
    precision_scope& operator=(const precision_scope&) = delete;

private:
    precision previous_;
};

} // namespace petra
