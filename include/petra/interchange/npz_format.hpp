// NumPy's .npz files, read and written without a compression library
// (floor 1 of the interchange: arrays by name, nothing of networks).
//
// An .npz file is a zip archive whose members are .npy files, one array
// each, the member "<name>.npy" holding the array <name>: what numpy.savez
// writes and numpy.load reads. petra reads and writes:
//   - members stored without compression (numpy.savez; numpy.savez_compressed
//     is refused with a sentence saying so), with or without ZIP64 extra
//     fields, each checked against its CRC-32;
//   - .npy format versions 1 to 3, dtypes '<f4' (float32) and '<f8'
//     (float64), C order, up to 8 dimensions.
// The writer stores float32 or float64 arrays in C order, every member
// dated 1980-01-01 so that the same arrays give the same bytes.
//
//   npz_writer out("arrays.npz");
//   out.add("logits", std::span<const float>(values), {64, 10});
//   out.commit();                                 // replaces the file whole
//
//   npz_file in("arrays.npz");                    // reads and checks it all
//   std::vector<float> logits(640);
//   in.read("logits", std::span<float>(logits));  // float64 is converted
//
// npz_archive_view reads an archive already in memory (a blob in flash, a
// buffer the caller filled) and allocates nothing unless it reports an
// error: the embedded path (npz.hpp's load_npz of a byte span).
//
// Every refusal is raise_error(error_kind::runtime_error, ...) (error.hpp)
// with one sentence naming the file and, where one is at fault, the array.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <petra/error.hpp>
#include <petra/kernels/simd.hpp>
#include <petra/replacing_file.hpp>
#include <petra/train/crc32.hpp>

namespace petra {

static_assert(std::endian::native == std::endian::little,
              "petra's .npz files hold little-endian values and are read on little-endian machines only.");

// The element types petra reads and writes.
enum class npy_dtype : unsigned char { float32, float64 };

constexpr std::size_t npy_dtype_bytes(npy_dtype dtype) { return dtype == npy_dtype::float32 ? 4 : 8; }

// The most dimensions an array may have.
inline constexpr std::size_t npy_max_rank = 8;

// One array of an archive, as read: its name (the member's, without
// ".npy"), element type, shape and values (little-endian, C order), all
// views into the archive's bytes.
struct npz_array {
    std::string_view name;
    npy_dtype dtype = npy_dtype::float32;
    std::size_t rank = 0;
    std::array<std::size_t, npy_max_rank> extents{};
    std::span<const std::byte> data;

    std::size_t size() const
    {
        std::size_t values = 1;
        for (std::size_t axis = 0; axis < rank; ++axis) values *= extents[axis];
        return values;
    }
    std::span<const std::size_t> shape() const { return {extents.data(), rank}; }
};

// "[16, 1, 3, 3]".
inline std::string shape_text(std::span<const std::size_t> shape)
{
    std::string text = "[";
    for (std::size_t axis = 0; axis < shape.size(); ++axis) {
        if (axis > 0) text += ", ";
        text += std::to_string(shape[axis]);
    }
    return text + "]";
}

// The values of `array` into `values` (as many as the array holds),
// converted to T.
template <class T>
void copy_values(const npz_array& array, std::span<T> values)
{
    static_assert(std::is_floating_point_v<T>, "An array's values are read as float or double.");
    if (values.size() != array.size()) {
        raise_error(error_kind::invalid_argument, "npz: array '" + std::string(array.name) + "' holds " +
                                                      std::to_string(array.size()) + " values, not " +
                                                      std::to_string(values.size()) + ".");
    }
    const std::byte* from = array.data.data();
    for (std::size_t i = 0; i < values.size(); ++i) {
        if (array.dtype == npy_dtype::float32) {
            float value;
            std::memcpy(&value, from + 4 * i, 4);
            values[i] = static_cast<T>(value);
        } else {
            double value;
            std::memcpy(&value, from + 8 * i, 8);
            values[i] = static_cast<T>(value);
        }
    }
}

namespace detail {

inline constexpr std::uint32_t zip_local_signature = 0x04034b50;
inline constexpr std::uint32_t zip_central_signature = 0x02014b50;
inline constexpr std::uint32_t zip_end_signature = 0x06054b50;
inline constexpr std::size_t zip_local_header_bytes = 30;
inline constexpr std::size_t zip_central_header_bytes = 46;
inline constexpr std::size_t zip_end_bytes = 22;
inline constexpr std::uint16_t zip_dos_date_1980 = (0 << 9) | (1 << 5) | 1; // 1980-01-01
inline constexpr std::array<unsigned char, 6> npy_magic{0x93, 'N', 'U', 'M', 'P', 'Y'};

inline std::uint64_t load_little(const std::byte* at, std::size_t bytes)
{
    std::uint64_t value = 0;
    for (std::size_t i = 0; i < bytes; ++i) value |= std::uint64_t(std::to_integer<unsigned char>(at[i])) << (8 * i);
    return value;
}

// The .npy header's dictionary, e.g.
//   {'descr': '<f4', 'fortran_order': False, 'shape': (16, 1, 3, 3), }
// read into `array`; an empty string when it is sound, else what is wrong.
inline std::string parse_npy_dictionary(std::string_view text, npz_array& array)
{
    const auto value_of = [&](std::string_view key) -> std::string_view {
        const std::size_t at = text.find(key);
        if (at == std::string_view::npos) return {};
        std::size_t colon = text.find(':', at + key.size());
        if (colon == std::string_view::npos) return {};
        std::size_t begin = text.find_first_not_of(' ', colon + 1);
        return begin == std::string_view::npos ? std::string_view{} : text.substr(begin);
    };
    const std::string_view descr = value_of("'descr'");
    if (descr.starts_with("'<f4'")) {
        array.dtype = npy_dtype::float32;
    } else if (descr.starts_with("'<f8'")) {
        array.dtype = npy_dtype::float64;
    } else {
        const std::size_t end = descr.size() > 1 ? descr.find('\'', 1) : std::string_view::npos;
        return "has dtype " + std::string(end == std::string_view::npos ? "(unreadable)" : descr.substr(0, end + 1)) +
               "; petra reads float32 ('<f4') and float64 ('<f8')";
    }
    const std::string_view order = value_of("'fortran_order'");
    if (!order.starts_with("False")) {
        return order.starts_with("True") ? "is in Fortran order; petra reads C order"
                                         : "has no readable 'fortran_order'";
    }
    std::string_view shape = value_of("'shape'");
    if (!shape.starts_with("(") || shape.find(')') == std::string_view::npos) return "has no readable 'shape'";
    shape = shape.substr(1, shape.find(')') - 1);
    array.rank = 0;
    while (true) {
        const std::size_t begin = shape.find_first_not_of(", ");
        if (begin == std::string_view::npos) break;
        shape.remove_prefix(begin);
        std::size_t extent = 0, digits = 0;
        while (digits < shape.size() && shape[digits] >= '0' && shape[digits] <= '9') {
            if (extent > (std::size_t(1) << 48)) return "has an impossible 'shape'";
            extent = 10 * extent + std::size_t(shape[digits++] - '0');
        }
        if (digits == 0) return "has no readable 'shape'";
        if (array.rank == npy_max_rank) return "has more than " + std::to_string(npy_max_rank) + " dimensions";
        array.extents[array.rank++] = extent;
        shape.remove_prefix(digits);
    }
    return {};
}

} // namespace detail

// A whole .npz archive in memory, checked on construction: the zip
// directory, every member's local header, CRC-32 and .npy header, and that
// no two members share a name. Then its arrays are visited in the order
// they are stored, or found by name. Allocates nothing (except to report
// an error); the bytes must outlive the view and the arrays it gives.
class npz_archive_view {
public:
    // `label` names the archive in messages (its path, say).
    explicit npz_archive_view(std::span<const std::byte> bytes, std::string_view label = "the archive")
        : bytes_(bytes), label_(label)
    {
        find_directory();
        // Every member read and checked once, then its name against those
        // stored before it (names only: the directory is walked, no member
        // read again).
        for_each_member(
            [&](const npz_array& array, std::size_t entry_offset) {
                for (std::size_t at = directory_offset_; at < entry_offset;) {
                    if (entry_name(at, at) == array.name) {
                        fail("holds the array '" + std::string(array.name) + "' twice");
                    }
                }
            },
            /*verify=*/true);
    }

    std::size_t size() const { return count_; }
    std::string_view label() const { return label_; }

    // Calls visit(array) for each array, in the order they are stored.
    template <class Visitor>
    void for_each(Visitor&& visit) const
    {
        for_each_member([&](const npz_array& array, std::size_t) { visit(array); }, false);
    }

    // The array named `name`; false if there is none.
    bool find(std::string_view name, npz_array& found) const
    {
        bool present = false;
        for_each([&](const npz_array& array) {
            if (!present && array.name == name) {
                found = array;
                present = true;
            }
        });
        return present;
    }

    // The array named `name`, refused with a sentence if there is none.
    npz_array at(std::string_view name) const
    {
        npz_array found;
        if (!find(name, found)) fail("has no array '" + std::string(name) + "'");
        return found;
    }

    [[noreturn]] void fail(const std::string& what) const
    {
        raise_error(error_kind::runtime_error, "npz file '" + std::string(label_) + "' " + what + ".");
    }

private:
    std::uint64_t field(std::size_t offset, std::size_t bytes) const
    {
        return detail::load_little(bytes_.data() + offset, bytes);
    }

    // The end-of-directory record, searched from the end (a comment may follow it).
    void find_directory()
    {
        if (bytes_.size() < detail::zip_end_bytes) {
            fail("is too short to be an .npz file (" + std::to_string(bytes_.size()) + " bytes)");
        }
        const std::size_t last = bytes_.size() - detail::zip_end_bytes;
        const std::size_t first = last > 65535 ? last - 65535 : 0;
        std::size_t end = last + 1;
        for (std::size_t at = last + 1; at-- > first;) {
            if (field(at, 4) == detail::zip_end_signature &&
                at + detail::zip_end_bytes + field(at + 20, 2) == bytes_.size()) {
                end = at;
                break;
            }
        }
        if (end > last) fail("is truncated, or is not an .npz file (no zip directory at its end)");
        if (field(end + 4, 2) != 0 || field(end + 6, 2) != 0 || field(end + 8, 2) != field(end + 10, 2)) {
            fail("is a zip archive split over several files");
        }
        count_ = field(end + 10, 2);
        directory_bytes_ = field(end + 12, 4);
        directory_offset_ = field(end + 16, 4);
        if (count_ == 0xFFFF || directory_offset_ == 0xFFFFFFFF || directory_bytes_ == 0xFFFFFFFF) {
            fail("needs ZIP64 directories (over 65,535 arrays or 4 GiB), which petra does not read");
        }
        if (directory_offset_ > end || directory_bytes_ != end - directory_offset_) {
            fail("is truncated or corrupted (its zip directory lies outside the file)");
        }
    }

    // Calls visit(array, entry_offset) for each member in directory order,
    // checking each (verify: its CRC-32 too).
    template <class Visitor>
    void for_each_member(Visitor&& visit, bool verify) const
    {
        std::size_t at = directory_offset_;
        const std::size_t directory_end = directory_offset_ + directory_bytes_;
        for (std::size_t member = 0; member < count_; ++member) {
            const std::size_t entry_offset = at;
            npz_array array;
            at = read_member(at, directory_end, array, verify);
            visit(array, entry_offset);
        }
        if (at != directory_end) fail("is corrupted (its zip directory does not end where it says)");
    }
    // The array name of the directory entry at `at` (already checked by
    // read_member); `next` becomes where the next entry starts.
    std::string_view entry_name(std::size_t at, std::size_t& next) const
    {
        const std::size_t name_bytes = field(at + 28, 2);
        next = at + detail::zip_central_header_bytes + name_bytes + field(at + 30, 2) + field(at + 32, 2);
        return {reinterpret_cast<const char*>(bytes_.data() + at + detail::zip_central_header_bytes), name_bytes - 4};
    }

    // Reads the directory entry at `at` and its member into `array`;
    // returns where the next entry starts.
    std::size_t read_member(std::size_t at, std::size_t directory_end, npz_array& array, bool verify) const
    {
        if (at + detail::zip_central_header_bytes > directory_end || field(at, 4) != detail::zip_central_signature) {
            fail("is corrupted (a zip directory entry is damaged)");
        }
        const std::size_t flags = field(at + 8, 2), method = field(at + 10, 2);
        const std::uint32_t crc = std::uint32_t(field(at + 16, 4));
        std::uint64_t stored_bytes = field(at + 20, 4), plain_bytes = field(at + 24, 4);
        const std::size_t name_bytes = field(at + 28, 2), extra_bytes = field(at + 30, 2),
                          comment_bytes = field(at + 32, 2);
        std::uint64_t local = field(at + 42, 4);
        const std::size_t name_at = at + detail::zip_central_header_bytes;
        const std::size_t next = name_at + name_bytes + extra_bytes + comment_bytes;
        if (next > directory_end) fail("is corrupted (a zip directory entry runs past the directory)");
        const std::string_view member(reinterpret_cast<const char*>(bytes_.data() + name_at), name_bytes);
        read_zip64_sizes(name_at + name_bytes, extra_bytes, plain_bytes, stored_bytes, local, member);
        if (!member.ends_with(".npy") || member.size() == 4) {
            fail("holds '" + std::string(member) + "', which is not an .npy member");
        }
        array.name = member.substr(0, member.size() - 4);
        // Made only for a message: a member read allocates nothing.
        const auto name = [&] { return std::string(array.name); };
        if ((flags & 1) != 0) fail("holds the array '" + name() + "' encrypted");
        if (method != 0) {
            fail("holds the array '" + name() +
                 "' compressed (numpy.savez_compressed); petra reads archives written by numpy.savez");
        }
        if (stored_bytes != plain_bytes) fail("is corrupted (the array '" + name() + "' has two sizes)");
        if (local > directory_offset_ || directory_offset_ - local < detail::zip_local_header_bytes ||
            field(std::size_t(local), 4) != detail::zip_local_signature) {
            fail("is corrupted (the array '" + name() + "' has no sound local header)");
        }
        const std::size_t local_name_bytes = field(std::size_t(local) + 26, 2);
        const std::size_t local_extra_bytes = field(std::size_t(local) + 28, 2);
        const std::uint64_t data_at = local + detail::zip_local_header_bytes + local_name_bytes + local_extra_bytes;
        if (local_name_bytes != name_bytes || data_at > directory_offset_ ||
            std::memcmp(bytes_.data() + local + detail::zip_local_header_bytes, member.data(), name_bytes) != 0) {
            fail("is corrupted (the array '" + name() + "' has a local header that disagrees with the directory)");
        }
        if (plain_bytes > directory_offset_ - data_at) fail("is truncated (the array '" + name() + "' is cut short)");
        const std::span<const std::byte> npy = bytes_.subspan(std::size_t(data_at), std::size_t(plain_bytes));
        if (verify && detail::crc32_update(0, npy.data(), npy.size()) != crc) {
            fail("is corrupted (the array '" + name() + "' does not match its checksum)");
        }
        read_npy(npy, array);
        return next;
    }

    // Sizes and offset of a member that has ZIP64 extra fields (numpy.savez
    // writes them): the 8-byte values that stand in for fields of all ones.
    void read_zip64_sizes(std::size_t extra_at, std::size_t extra_bytes, std::uint64_t& plain_bytes,
                          std::uint64_t& stored_bytes, std::uint64_t& local, std::string_view member) const
    {
        for (std::size_t at = extra_at; at + 4 <= extra_at + extra_bytes;) {
            const std::size_t id = field(at, 2), bytes = field(at + 2, 2);
            if (at + 4 + bytes > extra_at + extra_bytes) break;
            if (id == 1) {
                std::size_t read = at + 4;
                for (std::uint64_t* value : {&plain_bytes, &stored_bytes, &local}) {
                    if (*value != 0xFFFFFFFF) continue;
                    if (read + 8 > at + 4 + bytes)
                        fail("is corrupted (the member '" + std::string(member) + "' has a short ZIP64 field)");
                    *value = field(read, 8);
                    read += 8;
                }
            }
            at += 4 + bytes;
        }
    }

    void read_npy(std::span<const std::byte> npy, npz_array& array) const
    {
        const auto name = [&] { return std::string(array.name); };
        if (npy.size() < 10 || std::memcmp(npy.data(), detail::npy_magic.data(), detail::npy_magic.size()) != 0) {
            fail("holds '" + name() + ".npy', which is not an .npy array");
        }
        const std::size_t major = std::to_integer<std::size_t>(npy[6]);
        if (major < 1 || major > 3) {
            fail("holds the array '" + name() + "' in .npy format version " + std::to_string(major) +
                 "; petra reads versions 1 to 3");
        }
        const std::size_t length_bytes = major == 1 ? 2 : 4;
        const std::size_t header_at = 8 + length_bytes;
        if (npy.size() < header_at) fail("is truncated (the array '" + name() + "' has no header)");
        const std::uint64_t header_bytes = detail::load_little(npy.data() + 8, length_bytes);
        if (header_bytes > npy.size() - header_at) fail("is truncated (the array '" + name() + "' has no header)");
        const std::string_view header(reinterpret_cast<const char*>(npy.data() + header_at), std::size_t(header_bytes));
        const std::string problem = detail::parse_npy_dictionary(header, array);
        if (!problem.empty()) fail("holds the array '" + name() + "', which " + problem);
        const std::size_t data_bytes = npy.size() - header_at - std::size_t(header_bytes);
        const std::size_t element_bytes = npy_dtype_bytes(array.dtype);
        // The shape's product, refused before it can overflow.
        std::size_t values = 1;
        for (std::size_t axis = 0; axis < array.rank; ++axis) {
            if (array.extents[axis] != 0 && values > data_bytes / array.extents[axis]) values = data_bytes + 1;
            else values *= array.extents[axis];
        }
        if (values > data_bytes / element_bytes || values * element_bytes != data_bytes) {
            fail("holds the array '" + name() + "' of shape " + shape_text(array.shape()) + " in " +
                 std::to_string(data_bytes) + " bytes of values; it needs " +
                 (values > data_bytes ? std::string("more") : std::to_string(values * element_bytes)));
        }
        array.data = npy.subspan(header_at + std::size_t(header_bytes));
    }

    std::span<const std::byte> bytes_;
    std::string_view label_;
    std::size_t count_ = 0;
    std::size_t directory_offset_ = 0;
    std::size_t directory_bytes_ = 0;
};

// An .npz file read whole into memory and checked (npz_archive_view).
class npz_file {
public:
    explicit npz_file(std::string path) : path_(std::move(path)), bytes_(read_whole(path_)), archive_(bytes_, path_) {}
    npz_file(const npz_file&) = delete;
    npz_file& operator=(const npz_file&) = delete;

    const npz_archive_view& archive() const { return archive_; }
    const std::string& path() const { return path_; }

    // The shape of the array named `name`.
    std::vector<std::size_t> shape(std::string_view name) const
    {
        const npz_array array = archive_.at(name);
        return {array.extents.begin(), array.extents.begin() + std::ptrdiff_t(array.rank)};
    }
    // Its values, converted to T; `values` holds as many as the array.
    template <class T>
    void read(std::string_view name, std::span<T> values) const
    {
        copy_values(archive_.at(name), values);
    }

private:
    static kernels::aligned_vector<std::byte> read_whole(const std::string& path)
    {
        std::FILE* file = std::fopen(path.c_str(), "rb");
        if (file == nullptr) {
            raise_error(error_kind::runtime_error,
                        "npz file '" + path + "' cannot be opened (" + std::string(std::strerror(errno)) + ").");
        }
        kernels::aligned_vector<std::byte> bytes;
        std::array<std::byte, 1 << 16> chunk;
        for (std::size_t got; (got = std::fread(chunk.data(), 1, chunk.size(), file)) > 0;) {
            bytes.insert(bytes.end(), chunk.begin(), chunk.begin() + std::ptrdiff_t(got));
        }
        const bool failed = std::ferror(file) != 0;
        std::fclose(file);
        if (failed) raise_error(error_kind::runtime_error, "npz file '" + path + "' could not be read.");
        return bytes;
    }

    std::string path_;
    kernels::aligned_vector<std::byte> bytes_;
    npz_archive_view archive_;
};

// Writes arrays to an .npz file, replaced whole by commit()
// (replacing_file.hpp); without commit() the file is untouched.
class npz_writer {
public:
    explicit npz_writer(std::string path) : file_(std::move(path), "npz_writer") {}

    // Adds the array `name` of the given shape (C order; values.size() must
    // be the shape's product), stored as float32 for float values and
    // float64 for double.
    template <class T>
    void add(std::string_view name, std::span<const T> values, std::span<const std::size_t> shape)
    {
        static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "An .npz array holds float or double.");
        std::size_t count = 1;
        for (const std::size_t extent : shape) count *= extent;
        if (count != values.size() || shape.size() > npy_max_rank || name.empty()) {
            raise_error(error_kind::invalid_argument,
                        "npz_writer: the array '" + std::string(name) + "' of shape " + shape_text(shape) + " given " +
                            std::to_string(values.size()) + " values (a name, at most " + std::to_string(npy_max_rank) +
                            " dimensions and the shape's product are needed).");
        }
        for (const member& written : members_) {
            if (written.name == std::string(name) + ".npy") {
                raise_error(error_kind::invalid_argument, "npz_writer: the array '" + std::string(name) + "' twice.");
            }
        }
        const std::string header = npy_header(std::is_same_v<T, float> ? "<f4" : "<f8", shape);
        const std::uint64_t bytes = header.size() + values.size_bytes();
        const std::size_t offset = file_.size();
        if (bytes >= 0xFFFFFFFF || offset >= 0xFFFFFFFF) {
            raise_error(error_kind::invalid_argument,
                        "npz_writer: '" + file_.path() + "' would pass 4 GiB, which needs ZIP64 (not written).");
        }
        std::uint32_t crc = detail::crc32_update(0, header.data(), header.size());
        crc = detail::crc32_update(crc, values.data(), values.size_bytes());
        member written{std::string(name) + ".npy", crc, std::uint32_t(bytes), std::uint32_t(offset)};
        std::array<unsigned char, detail::zip_local_header_bytes> local{};
        put_common(local.data() + 4, written);
        put(local.data(), detail::zip_local_signature, 4);
        file_.write(local.data(), local.size());
        file_.write(written.name.data(), written.name.size());
        file_.write(header.data(), header.size());
        file_.write(values.data(), values.size_bytes());
        members_.push_back(std::move(written));
    }
    template <class T>
    void add(std::string_view name, std::span<const T> values, std::initializer_list<std::size_t> shape)
    {
        add(name, values, std::span<const std::size_t>(shape.begin(), shape.size()));
    }

    // Writes the zip directory and replaces the file.
    void commit()
    {
        const std::size_t directory_offset = file_.size();
        if (members_.size() >= 0xFFFF) {
            raise_error(error_kind::invalid_argument, "npz_writer: over 65,534 arrays need ZIP64 (not written).");
        }
        for (const member& written : members_) {
            std::array<unsigned char, detail::zip_central_header_bytes> entry{};
            put(entry.data(), detail::zip_central_signature, 4);
            put(entry.data() + 4, 20, 2); // made by: version 2.0
            put_common(entry.data() + 6, written);
            put(entry.data() + 42, written.offset, 4);
            file_.write(entry.data(), entry.size());
            file_.write(written.name.data(), written.name.size());
        }
        const std::size_t directory_bytes = file_.size() - directory_offset;
        std::array<unsigned char, detail::zip_end_bytes> end{};
        put(end.data(), detail::zip_end_signature, 4);
        put(end.data() + 8, members_.size(), 2);
        put(end.data() + 10, members_.size(), 2);
        put(end.data() + 12, directory_bytes, 4);
        put(end.data() + 16, directory_offset, 4);
        file_.write(end.data(), end.size());
        file_.commit();
    }

private:
    struct member {
        std::string name; // "<array>.npy"
        std::uint32_t crc;
        std::uint32_t bytes;
        std::uint32_t offset;
    };

    static void put(unsigned char* at, std::uint64_t value, std::size_t bytes)
    {
        for (std::size_t i = 0; i < bytes; ++i) at[i] = static_cast<unsigned char>(value >> (8 * i));
    }
    // The fields a local header (from byte 4) and a directory entry (from
    // byte 6) share: version needed, flags, method, time, date, CRC-32,
    // sizes, name length, extra length.
    static void put_common(unsigned char* at, const member& written)
    {
        put(at, 20, 2);    // version needed: 2.0
        put(at + 2, 0, 2); // no flags
        put(at + 4, 0, 2); // stored
        put(at + 6, 0, 2); // 00:00
        put(at + 8, detail::zip_dos_date_1980, 2);
        put(at + 10, written.crc, 4);
        put(at + 14, written.bytes, 4);
        put(at + 18, written.bytes, 4);
        put(at + 22, written.name.size(), 2);
        put(at + 24, 0, 2); // no extra field
    }

    // An .npy version 1.0 header: magic, version, length, the dictionary
    // padded with spaces and a newline so that the values start on a
    // multiple of 64 bytes.
    static std::string npy_header(std::string_view descr, std::span<const std::size_t> shape)
    {
        std::string dictionary = "{'descr': '" + std::string(descr) + "', 'fortran_order': False, 'shape': (";
        for (std::size_t axis = 0; axis < shape.size(); ++axis) {
            dictionary += std::to_string(shape[axis]);
            if (axis + 1 < shape.size() || shape.size() == 1) dictionary += ",";
            if (axis + 1 < shape.size()) dictionary += " ";
        }
        dictionary += "), }";
        const std::size_t unpadded = 10 + dictionary.size() + 1;
        dictionary.append((64 - unpadded % 64) % 64, ' ');
        dictionary += '\n';
        std::string header(detail::npy_magic.begin(), detail::npy_magic.end());
        header += '\x01';
        header += '\x00';
        header += static_cast<char>(dictionary.size() & 0xFF);
        header += static_cast<char>(dictionary.size() >> 8);
        return header + dictionary;
    }

    replacing_file file_;
    std::vector<member> members_;
};

} // namespace petra
