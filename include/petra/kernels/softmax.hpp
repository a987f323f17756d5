// Row-wise softmax and the softmax cross-entropy loss with its gradient, on
// row-major matrices of logits (one row per example, one column per class).
//
// Both subtract the row maximum before exponentiating: softmax(z) equals
// softmax(z - max z), and with the shift every exponent is <= 0, so exp never
// overflows and the largest term is exactly 1, so the row sum never underflows
// to 0. The row maximum and the divisions run in vector loops over the
// classes with a scalar loop finishing each row, so any number of classes (10
// is the common case) is handled; the exponentials are scalar (see
// detail::shifted_exponential_sum for why).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include <xsimd/xsimd.hpp>

#include <petra/error.hpp>
#include <petra/kernels/profile.hpp>
#include <petra/kernels/simd.hpp>

namespace petra::kernels {

namespace detail {

[[noreturn]] inline void softmax_fail(const char* function, const std::string& what)
{
    raise_error(error_kind::invalid_argument, std::string("petra::kernels::") + function + ": " + what);
}

// what is a literal, so that a check that passes (every call of a training
// step) builds no string and allocates nothing.
inline void softmax_require(bool condition, const char* function, const char* what)
{
    if (!condition) softmax_fail(function, what);
}

// max of row[0 .. classes), classes > 0.
template <class T>
T row_max(std::size_t classes, const T* row)
{
    using vector = simd<T>;
    constexpr std::size_t width = vector::size;
    T largest = row[0];
    std::size_t j = 0;
    if (classes >= width) {
        vector largest_v = vector::load_unaligned(row);
        for (j = width; j < classes - classes % width; j += width) {
            // A select rather than xsimd::max, whose AVX-512 form draws the
            // same false warning as the vector exp (see
            // shifted_exponential_sum).
            const vector candidate = vector::load_unaligned(row + j);
            largest_v = xsimd::select(candidate > largest_v, candidate, largest_v);
        }
        alignas(buffer_alignment) T lanes[width];
        largest_v.store_aligned(lanes);
        for (T lane : lanes) largest = std::max(largest, lane);
    }
    for (; j < classes; ++j) largest = std::max(largest, row[j]);
    return largest;
}

// Returns the sum of exp(row[j] - shift) over j in [0, classes) and, when
// exponentials is not null, writes each term to exponentials[j].
// exponentials may be row itself.
//
// The exponentials are scalar std::exp calls. With the usual 10 classes a row
// is shorter than one AVX-512 vector of float, so a vector exp would mostly
// not run at all; and the vector exp at hand inlines AVX-512 intrinsics that g++ 12
// reports as reading uninitialised values, which -Werror turns into a failed
// build in some inlining contexts (sanitizer builds among them).
template <class T>
T shifted_exponential_sum(std::size_t classes, const T* row, T shift, T* exponentials)
{
    T total = T(0);
    for (std::size_t j = 0; j < classes; ++j) {
        const T term = std::exp(row[j] - shift);
        if (exponentials != nullptr) exponentials[j] = term;
        total += term;
    }
    return total;
}

// values[j] = values[j] / divisor for j in [0, classes).
template <class T>
void divide_row(std::size_t classes, T* values, T divisor)
{
    using vector = simd<T>;
    constexpr std::size_t width = vector::size;
    const vector divisor_v(divisor);
    std::size_t j = 0;
    for (; j < classes - classes % width; j += width) {
        (vector::load_unaligned(values + j) / divisor_v).store_unaligned(values + j);
    }
    for (; j < classes; ++j) values[j] /= divisor;
}

} // namespace detail

// probabilities_out[r * ld_out + j] = exp(z_j - m) / sum_k exp(z_k - m), with
// z the row r of logits (z_j = logits[r * ld_logits + j]) and m = max_k z_k,
// for r in [0, rows) and j in [0, classes). Every row of the result sums to 1
// up to rounding. With rows == 0 or classes == 0 nothing is read or written.
// probabilities_out may be logits itself when ld_out == ld_logits (in place);
// any other overlap is not allowed. Throws std::invalid_argument when a
// leading dimension is smaller than classes.
//
// Example: the row (1, 2, 3) becomes (0.0900, 0.2447, 0.6652).
template <class T>
void softmax_rows(std::size_t rows, std::size_t classes, const T* logits, std::size_t ld_logits, T* probabilities_out,
                  std::size_t ld_out)
{
    static_assert(std::is_floating_point_v<T>, "softmax_rows is defined for float and double");
    // Per element a subtraction, an exponential and a division (counted one
    // each); logits read, probabilities written.
    PETRA_PROFILE_KERNEL("softmax_rows", "%zu rows x %zu classes", {rows, classes}, 3.0 * double(rows * classes),
                         2.0 * double(rows * classes * sizeof(T)));
    if (rows == 0 || classes == 0) return;
    detail::softmax_require(ld_logits >= classes, "softmax_rows", "ld_logits is smaller than the number of classes");
    detail::softmax_require(ld_out >= classes, "softmax_rows", "ld_out is smaller than the number of classes");
    for (std::size_t r = 0; r < rows; ++r) {
        const T* row = logits + r * ld_logits;
        T* out = probabilities_out + r * ld_out;
        const T shift = detail::row_max(classes, row);
        const T total = detail::shifted_exponential_sum(classes, row, shift, out);
        detail::divide_row(classes, out, total);
    }
}

// The arguments of softmax_cross_entropy. Row r of the logits is
// logits[r * ld_logits .. r * ld_logits + classes) and its true class is
// labels[r]; the outputs, each optional (null when not wanted), hold row r at
// [r * ld_out .. r * ld_out + classes).
template <class T>
struct softmax_cross_entropy_arguments {
    std::size_t rows;
    std::size_t classes;
    const T* logits;
    std::size_t ld_logits;
    const std::int32_t* labels;
    T* probabilities; // or null
    T* grad_logits;   // or null
    std::size_t ld_out;
};

// Mean softmax cross-entropy of rows examples, and optionally its gradient.
// With z the logits of row r, m = max_k z_k and p = softmax(z), the loss of
// row r is
//   log(sum_k exp(z_k - m)) - (z_label - m)   (= -log p_label, stably),
// and the function returns the mean of these losses over the rows.
//   probabilities, when not null, receives p for each row at
//     probabilities[r * ld_out + j];
//   grad_logits, when not null, receives the gradient of the returned mean
//     with respect to the logits, (p_j - [j == label]) / rows, at
//     grad_logits[r * ld_out + j].
// Either output may be null, both at once too (loss only); ld_out is then
// unused. The outputs must not overlap logits, labels or each other.
// Throws std::invalid_argument, before writing anything, when rows == 0,
// classes == 0, ld_logits < classes, ld_out < classes with an output
// requested, or a label lies outside [0, classes); the message names the
// first such row and its label.
//
// Example: logits (0, 0) with label 1 give loss log 2 = 0.6931, probabilities
// (0.5, 0.5) and, for one row, gradient (0.5, -0.5).
template <class T>
T softmax_cross_entropy(const softmax_cross_entropy_arguments<T>& arguments)
{
    static_assert(std::is_floating_point_v<T>, "softmax_cross_entropy is defined for float and double");
    const std::size_t rows = arguments.rows, classes = arguments.classes;
    const std::size_t ld_logits = arguments.ld_logits, ld_out = arguments.ld_out;
    const T* logits = arguments.logits;
    const std::int32_t* labels = arguments.labels;
    T* probabilities_out = arguments.probabilities;
    T* grad_logits_out = arguments.grad_logits;
    // As softmax_rows, plus a division for the gradient; logits and labels
    // read, each requested output written.
    PETRA_PROFILE_KERNEL(
        "softmax_cross_entropy", "%zu rows x %zu classes", {rows, classes}, 4.0 * double(rows * classes),
        double(rows * classes * sizeof(T)) * (1.0 + (probabilities_out != nullptr) + (grad_logits_out != nullptr)) +
            double(rows * sizeof(std::int32_t)));
    constexpr const char* function = "softmax_cross_entropy";
    detail::softmax_require(rows > 0, function, "rows is 0; the mean loss of no example is undefined");
    detail::softmax_require(classes > 0, function, "classes is 0; a softmax needs at least one class");
    detail::softmax_require(ld_logits >= classes, function, "ld_logits is smaller than the number of classes");
    detail::softmax_require((probabilities_out == nullptr && grad_logits_out == nullptr) || ld_out >= classes, function,
                            "ld_out is smaller than the number of classes");
    for (std::size_t r = 0; r < rows; ++r) {
        const std::int32_t label = labels[r];
        // The message is built only for a bad label: this check runs on
        // every row of every training step, which must not allocate.
        if (!(label >= 0 && static_cast<std::size_t>(label) < classes)) {
            detail::softmax_fail(function, "label " + std::to_string(label) + " of row " + std::to_string(r) +
                                               " is outside [0, " + std::to_string(classes) + ")");
        }
    }

    const T rows_t = static_cast<T>(rows);
    T loss_total = T(0);
    for (std::size_t r = 0; r < rows; ++r) {
        const T* row = logits + r * ld_logits;
        const auto label = static_cast<std::size_t>(labels[r]);
        const T shift = detail::row_max(classes, row);
        // The exponentials land in whichever output exists, and are turned
        // into probabilities, then gradients, in place.
        T* probabilities = probabilities_out != nullptr ? probabilities_out + r * ld_out
                           : grad_logits_out != nullptr ? grad_logits_out + r * ld_out
                                                        : nullptr;
        const T total = detail::shifted_exponential_sum(classes, row, shift, probabilities);
        loss_total += std::log(total) - (row[label] - shift);
        if (probabilities == nullptr) continue;
        detail::divide_row(classes, probabilities, total);
        if (grad_logits_out == nullptr) continue;
        T* gradient = grad_logits_out + r * ld_out;
        const T probability_of_label = probabilities[label];
        if (gradient != probabilities) std::copy(probabilities, probabilities + classes, gradient);
        detail::divide_row(classes, gradient, rows_t);
        gradient[label] = (probability_of_label - T(1)) / rows_t;
    }
    return loss_total / rows_t;
}

} // namespace petra::kernels
