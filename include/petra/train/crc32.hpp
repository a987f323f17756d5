// CRC-32 (the checksum of gzip and PNG: reflected polynomial 0xEDB88320,
// initial value and final xor all ones), so that checkpoint files need no
// compression library. Contracts:
//
//   crc32_update(0, "123456789", 9) == 0xCBF43926         // the standard check value
//   crc32_update(crc32_update(0, a, n), b, m) == CRC of a followed by b
//   crc32_combine(crc_of_a, crc_of_b, m) == CRC of a followed by b (m bytes),
//       for a caller that learns a's bytes only after b's (a header written last).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace petra::detail {

inline constexpr std::uint32_t crc32_polynomial = 0xEDB88320u;

// The CRC of each byte value alone, before the final xor.
inline constexpr std::array<std::uint32_t, 256> crc32_table = [] {
    std::array<std::uint32_t, 256> table{};
    for (std::uint32_t byte = 0; byte < 256; ++byte) {
        std::uint32_t crc = byte;
        for (int bit = 0; bit < 8; ++bit) crc = (crc & 1u) != 0 ? (crc >> 1) ^ crc32_polynomial : crc >> 1;
        table[byte] = crc;
    }
    return table;
}();

// The running CRC `crc` (0 to start) continued over size bytes.
inline std::uint32_t crc32_update(std::uint32_t crc, const void* data, std::size_t size)
{
    const auto* bytes = static_cast<const unsigned char*>(data);
    crc = ~crc;
    for (std::size_t i = 0; i < size; ++i) crc = crc32_table[(crc ^ bytes[i]) & 0xFFu] ^ (crc >> 8);
    return ~crc;
}

// a * b modulo the polynomial, both polynomials over GF(2) in the reflected
// bit order (the bit 1 << 31 is x^0).
constexpr std::uint32_t crc32_multiply(std::uint32_t a, std::uint32_t b)
{
    std::uint32_t product = 0;
    for (std::uint32_t bit = 1u << 31; bit != 0; bit >>= 1) {
        if ((a & bit) != 0) product ^= b;
        b = (b & 1u) != 0 ? (b >> 1) ^ crc32_polynomial : b >> 1;
    }
    return product;
}

// x^(8 bytes) modulo the polynomial: appending that many bytes to a message
// multiplies the CRC of the part before them by this.
constexpr std::uint32_t crc32_shift_of(std::uint64_t bytes)
{
    std::uint32_t result = 1u << 31; // x^0
    std::uint32_t power = 1u << 23;  // x^8: one byte
    for (; bytes != 0; bytes >>= 1) {
        if ((bytes & 1u) != 0) result = crc32_multiply(result, power);
        power = crc32_multiply(power, power);
    }
    return result;
}

// The CRC of a message A followed by B from the CRC of each and B's length.
constexpr std::uint32_t crc32_combine(std::uint32_t crc_a, std::uint32_t crc_b, std::uint64_t bytes_b)
{
    return crc32_multiply(crc32_shift_of(bytes_b), crc_a) ^ crc_b;
}

} // namespace petra::detail
