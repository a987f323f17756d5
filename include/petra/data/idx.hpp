// IDX files (floor 9: data), the format of MNIST and Fashion-MNIST: a 4-byte
// magic number (two zero bytes, a type code, the number of dimensions), the
// dimensions as big-endian 32-bit counts, then the values in row-major
// order. Files may be gzip-compressed (the usual ".gz"), read through zlib.
//
// read_idx(path) returns the values as an xtensor array of unsigned bytes
// (type code 0x08, the only type the image datasets use) with the file's
// dimensions. Every way a file can be wrong is a data_error whose message
// names the file and says what is wrong: missing, empty, not gzip although
// named .gz, corrupt compressed data, wrong magic number, an unsupported
// type, zero or too many dimensions, fewer values than the dimensions say
// (truncated) or more. Nothing is returned half-read.
#pragma once

#if !(defined(__cpp_exceptions) || defined(__EXCEPTIONS))
#error "petra: data/idx.hpp needs exceptions: it reports its errors with them only (see error.hpp)."
#endif

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <zlib.h>

#include <xtensor/xarray.hpp>

namespace petra {

class data_error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

namespace detail {

// The content of a file, decompressed when it is gzip data. Reading stops
// once more than expected_size(bytes so far) bytes are in: the caller knows
// from the header how long the file should be, so that a small compressed
// file that would inflate to gigabytes is never read whole.
template <class ExpectedSize>
std::vector<unsigned char> read_file_bytes(const std::string& path, ExpectedSize&& expected_size)
{
    std::FILE* probe = std::fopen(path.c_str(), "rb");
    if (probe == nullptr) throw data_error(path + ": cannot open the file (missing, or not readable).");
    unsigned char signature[2] = {0, 0};
    const std::size_t signature_bytes = std::fread(signature, 1, 2, probe);
    std::fclose(probe);
    if (signature_bytes == 0) throw data_error(path + ": the file is empty.");
    const bool gzip = signature_bytes == 2 && signature[0] == 0x1f && signature[1] == 0x8b;
    const bool named_gzip = path.size() >= 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
    if (named_gzip && !gzip) {
        throw data_error(path + ": the name ends in .gz but the file is not gzip data (no gzip signature).");
    }

    std::unique_ptr<gzFile_s, int (*)(gzFile)> file(gzopen(path.c_str(), "rb"), gzclose);
    if (!file) throw data_error(path + ": cannot open the file (missing, or not readable).");
    std::vector<unsigned char> bytes;
    std::array<unsigned char, 1 << 16> chunk;
    for (;;) {
        const int read = gzread(file.get(), chunk.data(), unsigned(chunk.size()));
        if (read < 0) {
            int code = 0;
            std::string message = gzerror(file.get(), &code);
            // zlib's message may start with the path itself.
            if (message.rfind(path + ": ", 0) == 0) message.erase(0, path.size() + 2);
            throw data_error(path + ": corrupt compressed data (" + message + ").");
        }
        if (read == 0) break;
        bytes.insert(bytes.end(), chunk.begin(), chunk.begin() + read);
        if (bytes.size() > expected_size(bytes)) return bytes;
    }
    // A gzip stream cut short reads as a clean end in some zlib versions;
    // gzerror tells.
    int code = 0;
    gzerror(file.get(), &code);
    if (code != Z_OK && code != Z_STREAM_END) {
        throw data_error(path + ": corrupt or truncated compressed data.");
    }
    return bytes;
}

inline std::uint32_t big_endian_32(const unsigned char* bytes)
{
    return (std::uint32_t(bytes[0]) << 24) | (std::uint32_t(bytes[1]) << 16) | (std::uint32_t(bytes[2]) << 8) |
           std::uint32_t(bytes[3]);
}

} // namespace detail

// The largest IDX file petra reads: 2^32 values (Fashion-MNIST's training
// images are 47 million).
inline constexpr std::size_t largest_idx_values = std::size_t{1} << 32;

// The values of an IDX file of unsigned bytes, with its dimensions.
inline xt::xarray<std::uint8_t> read_idx(const std::string& path)
{
    // The file's length as its header gives it, once the header is in.
    auto expected_size = [](const std::vector<unsigned char>& so_far) {
        constexpr std::size_t unknown = ~std::size_t{0};
        if (so_far.size() < 4) return unknown;
        const std::size_t rank = so_far[3], header = 4 + 4 * rank;
        if (so_far.size() < header || rank == 0 || rank > 4) return unknown;
        std::size_t count = 1;
        for (std::size_t d = 0; d < rank; ++d) {
            const std::size_t extent = detail::big_endian_32(so_far.data() + 4 + 4 * d);
            if (extent != 0 && count > largest_idx_values / extent) return unknown; // refused below
            count *= extent;
        }
        return header + count;
    };
    const std::vector<unsigned char> bytes = detail::read_file_bytes(path, expected_size);
    if (bytes.empty()) throw data_error(path + ": the file is empty.");
    if (bytes.size() < 4 || bytes[0] != 0 || bytes[1] != 0) {
        throw data_error(path + ": not an IDX file (its magic number does not start with two zero bytes).");
    }
    if (bytes[2] != 0x08) {
        char code[8];
        std::snprintf(code, sizeof code, "0x%02X", unsigned(bytes[2]));
        throw data_error(path + ": IDX value type " + code +
                         " is not supported; petra reads unsigned bytes (type 0x08).");
    }
    const std::size_t rank = bytes[3];
    if (rank == 0 || rank > 4) {
        throw data_error(path + ": an IDX file with " + std::to_string(rank) +
                         " dimensions; petra reads 1 to 4 dimensions.");
    }
    const std::size_t header = 4 + 4 * rank;
    if (bytes.size() < header) {
        throw data_error(path + ": truncated in its header (" + std::to_string(bytes.size()) + " bytes, the " +
                         std::to_string(rank) + " dimensions need " + std::to_string(header) + ").");
    }
    std::vector<std::size_t> shape(rank);
    std::size_t count = 1;
    for (std::size_t d = 0; d < rank; ++d) {
        shape[d] = detail::big_endian_32(bytes.data() + 4 + 4 * d);
        if (shape[d] == 0) throw data_error(path + ": dimension " + std::to_string(d) + " is 0.");
        if (count > largest_idx_values / shape[d]) {
            throw data_error(path + ": its dimensions describe more than 2^32 values, more than petra reads.");
        }
        count *= shape[d];
    }
    const std::size_t values = bytes.size() - header;
    if (values < count) {
        throw data_error(path + ": truncated: its dimensions need " + std::to_string(count) + " values, it holds " +
                         std::to_string(values) + ".");
    }
    if (values > count) {
        // Reading stopped soon after the expected end: at least this many.
        throw data_error(path + ": " + std::to_string(values - count) +
                         " or more bytes past the values its dimensions describe (wrong dimensions?).");
    }
    xt::xarray<std::uint8_t> array = xt::xarray<std::uint8_t>::from_shape(shape);
    std::copy(bytes.begin() + std::ptrdiff_t(header), bytes.end(), array.data());
    return array;
}

} // namespace petra
