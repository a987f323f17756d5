// Checkpoint files (floor 8): the two state_archive models, one that writes
// a file and one that reads it back.
//
//   {
//       checkpoint_writer out("run.checkpoint", net::signature);
//       pipeline.transfer_state(out);   // pauses the pipeline at a tick first
//       parameters.transfer_state(out); // so that no stage is updating them
//       out.commit();                   // atomically replaces run.checkpoint
//   }
//   checkpoint_reader in("run.checkpoint", net::signature);
//   pipeline.transfer_state(in);
//   parameters.transfer_state(in);
//   in.finish();                        // nothing left unread
//
// The file: a 32-byte header (the magic "PETRACKP", the format version, a
// byte-order mark, the network's signature, the payload's length), the
// payload (records: section names, counts, runs of values, text; each
// tagged with its kind and length), and a CRC-32 of header and payload.
// Values are stored in the machine's byte order; the mark refuses a file of
// the other order.
//
// Writing streams to "<path>.partial.<pid>" in the same directory, flushes
// it to disk, then renames it over <path> (replacing_file.hpp): a crash
// leaves the old checkpoint or the new one, never a mixture. Reading checks the whole file
// (length, checksum, version, signature) before it interprets a byte, so a
// damaged or foreign file is refused before anything is overwritten; then
// every record is checked against what the reader expects. Every failure is
// a checkpoint_error naming the file and, past the header, the section.
#pragma once

#if !(defined(__cpp_exceptions) || defined(__EXCEPTIONS))
#error "petra: train/checkpoint.hpp needs exceptions: it reports its errors with them only (see error.hpp)."
#endif

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

#include <petra/replacing_file.hpp>
#include <petra/state_archive.hpp>
#include <petra/train/crc32.hpp>

namespace petra {

struct checkpoint_error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

namespace detail {

inline constexpr std::array<char, 8> checkpoint_magic{'P', 'E', 'T', 'R', 'A', 'C', 'K', 'P'};
inline constexpr std::uint32_t checkpoint_format_version = 1;
inline constexpr std::uint32_t checkpoint_byte_order_mark = 0x01020304;
inline constexpr std::size_t checkpoint_header_bytes = 32;

struct checkpoint_header {
    std::array<char, 8> magic = checkpoint_magic;
    std::uint32_t version = checkpoint_format_version;
    std::uint32_t byte_order = checkpoint_byte_order_mark;
    std::uint64_t signature = 0;
    std::uint64_t payload_bytes = 0;
};
static_assert(sizeof(checkpoint_header) == checkpoint_header_bytes && std::is_trivially_copyable_v<checkpoint_header>);

enum class record_kind : std::uint8_t { section = 1, count = 2, expected = 3, values = 4, text = 5 };
enum class value_kind : std::uint8_t { float32 = 1, float64 = 2, int32 = 3 };

template <class T>
constexpr value_kind kind_of()
{
    if constexpr (std::is_same_v<T, float>) return value_kind::float32;
    else if constexpr (std::is_same_v<T, double>) return value_kind::float64;
    else {
        static_assert(std::is_same_v<T, std::int32_t>, "Checkpoints store float, double and int32 values.");
        return value_kind::int32;
    }
}

inline const char* describe(record_kind kind)
{
    switch (kind) {
    case record_kind::section: return "a section name";
    case record_kind::count: return "a count";
    case record_kind::expected: return "an expected figure";
    case record_kind::values: return "a run of values";
    case record_kind::text: return "a text";
    }
    return "an unknown record";
}

struct file_closer {
    void operator()(std::FILE* file) const { std::fclose(file); }
};
using file_handle = std::unique_ptr<std::FILE, file_closer>;

// Runs an I/O step of a checkpoint file, its failures as checkpoint_errors.
template <class Step>
auto as_checkpoint_error(Step&& step)
{
    try {
        return step();
    } catch (const std::runtime_error& error) {
        throw checkpoint_error(error.what());
    }
}

} // namespace detail

// Writes a checkpoint, record by record, to a temporary file; commit()
// makes it the checkpoint at `path`. Without commit() (an exception while
// saving) the temporary file is removed and `path` is untouched.
class checkpoint_writer {
public:
    static constexpr bool loading = false;

    checkpoint_writer(std::string path, std::uint64_t signature)
        : file_(detail::as_checkpoint_error([&] { return replacing_file(std::move(path), "checkpoint"); }))
    {
        header_.signature = signature;
        write_raw(&header_, sizeof header_, false); // the length is filled in by commit()
    }
    checkpoint_writer(const checkpoint_writer&) = delete;
    checkpoint_writer& operator=(const checkpoint_writer&) = delete;

    void section(std::string_view name)
    {
        record(detail::record_kind::section);
        length(name.size());
        write_raw(name.data(), name.size());
        section_ = name;
    }
    void count(std::size_t& value, std::size_t limit)
    {
        if (value > limit) {
            throw std::logic_error("checkpoint: section '" + section_ + "' saves " + std::to_string(value) +
                                   ", above its own limit " + std::to_string(limit) + ".");
        }
        record(detail::record_kind::count);
        length(value);
    }
    void expect(std::size_t value, std::string_view)
    {
        record(detail::record_kind::expected);
        length(value);
    }
    template <class T>
    void values(std::span<T> values)
    {
        record(detail::record_kind::values);
        const auto kind = detail::kind_of<std::remove_const_t<T>>();
        write_raw(&kind, 1);
        length(values.size());
        write_raw(values.data(), values.size_bytes());
    }
    void text(std::string& text)
    {
        record(detail::record_kind::text);
        length(text.size());
        write_raw(text.data(), text.size());
    }

    // Finishes the file (header, checksum), flushes it to disk and renames
    // it over `path` (replacing_file.hpp). The writer is spent afterwards.
    void commit()
    {
        if (committed_) throw std::logic_error("checkpoint: commit() called twice.");
        header_.payload_bytes = payload_bytes_;
        const std::uint32_t header_crc = detail::crc32_update(0, &header_, sizeof header_);
        const std::uint32_t crc = detail::crc32_combine(header_crc, payload_crc_, payload_bytes_);
        write_raw(&crc, sizeof crc, false);
        detail::as_checkpoint_error([&] {
            file_.overwrite(0, &header_, sizeof header_);
            file_.commit();
        });
        committed_ = true;
    }

    std::uint64_t payload_bytes() const { return payload_bytes_; }

private:
    void record(detail::record_kind kind) { write_raw(&kind, 1); }
    void length(std::uint64_t value) { write_raw(&value, sizeof value); }

    void write_raw(const void* data, std::size_t size, bool payload = true)
    {
        detail::as_checkpoint_error([&] { file_.write(data, size); });
        if (payload) {
            payload_crc_ = detail::crc32_update(payload_crc_, data, size);
            payload_bytes_ += size;
        }
    }

    replacing_file file_;
    bool committed_ = false;
    detail::checkpoint_header header_;
    std::uint32_t payload_crc_ = 0;
    std::uint64_t payload_bytes_ = 0;
    std::string section_;
};

// Reads a checkpoint back. The constructor checks the whole file and its
// signature; each call then checks its record against what it is given.
class checkpoint_reader {
public:
    static constexpr bool loading = true;

    checkpoint_reader(std::string path, std::uint64_t signature) : path_(std::move(path))
    {
        file_.reset(std::fopen(path_.c_str(), "rb"));
        if (!file_) fail("cannot be opened (" + std::string(std::strerror(errno)) + ")");
        if (std::fseek(file_.get(), 0, SEEK_END) != 0) fail_read();
        const long size = std::ftell(file_.get());
        if (size < 0 || std::fseek(file_.get(), 0, SEEK_SET) != 0) fail_read();
        const auto file_bytes = static_cast<std::uint64_t>(size);
        if (file_bytes < detail::checkpoint_header_bytes + sizeof(std::uint32_t)) {
            fail("is too short to be a checkpoint (" + std::to_string(file_bytes) + " bytes)");
        }
        detail::checkpoint_header header;
        read_exact(&header, sizeof header);
        if (header.magic != detail::checkpoint_magic) fail("is not a petra checkpoint (wrong magic number)");
        if (header.byte_order != detail::checkpoint_byte_order_mark) {
            fail("was written on a machine of another byte order, or is corrupted");
        }
        if (header.version != detail::checkpoint_format_version) {
            fail("has format version " + std::to_string(header.version) + "; this build reads version " +
                 std::to_string(detail::checkpoint_format_version));
        }
        const std::uint64_t framing = detail::checkpoint_header_bytes + sizeof(std::uint32_t);
        const bool impossible = header.payload_bytes > std::numeric_limits<std::uint64_t>::max() - framing;
        const std::uint64_t expected_bytes = framing + header.payload_bytes;
        if (impossible || file_bytes != expected_bytes) {
            const bool shorter = !impossible && file_bytes < expected_bytes;
            const std::string announced = impossible ? "an impossible length" : std::to_string(expected_bytes);
            fail(std::string(shorter ? "is truncated (" : "is corrupted (") + std::to_string(file_bytes) +
                 " bytes, its header announces " + announced + ")");
        }
        // The checksum, over everything before it, in one pass.
        std::uint32_t crc = detail::crc32_update(0, &header, sizeof header);
        std::array<unsigned char, 1 << 16> chunk;
        for (std::uint64_t left = header.payload_bytes; left > 0;) {
            const std::size_t size = std::size_t(std::min<std::uint64_t>(left, chunk.size()));
            read_exact(chunk.data(), size);
            crc = detail::crc32_update(crc, chunk.data(), size);
            left -= size;
        }
        std::uint32_t stored = 0;
        read_exact(&stored, sizeof stored);
        if (stored != crc) fail("is corrupted (its checksum does not match its contents)");
        if (header.signature != signature) {
            fail("was written for another network (signature " + hex(header.signature) + ", this network's is " +
                 hex(signature) + ")");
        }
        payload_left_ = header.payload_bytes;
        if (std::fseek(file_.get(), long(detail::checkpoint_header_bytes), SEEK_SET) != 0) fail_read();
    }
    checkpoint_reader(const checkpoint_reader&) = delete;
    checkpoint_reader& operator=(const checkpoint_reader&) = delete;

    void section(std::string_view name)
    {
        record(detail::record_kind::section);
        const std::uint64_t size = length();
        if (size > payload_left_) mismatch("a section name longer than the file");
        std::string found(std::size_t(size), '\0');
        payload(found.data(), found.size());
        if (found != name) {
            fail("holds section '" + found + "' where '" + std::string(name) +
                 "' was expected: it was saved by another program or another configuration");
        }
        section_ = found;
    }
    void count(std::size_t& value, std::size_t limit)
    {
        record(detail::record_kind::count);
        const std::uint64_t stored = length();
        if (stored > limit) {
            mismatch("the count " + std::to_string(stored) + ", above the limit " + std::to_string(limit));
        }
        value = std::size_t(stored);
    }
    void expect(std::size_t value, std::string_view what)
    {
        record(detail::record_kind::expected);
        const std::uint64_t stored = length();
        if (stored != value) {
            fail("section '" + section_ + "': its " + std::string(what) + " is " + std::to_string(stored) +
                 ", here it is " + std::to_string(value));
        }
    }
    template <class T>
    void values(std::span<T> values)
    {
        static_assert(!std::is_const_v<T>, "A checkpoint reads values into writable memory.");
        record(detail::record_kind::values);
        detail::value_kind kind{};
        payload(&kind, 1);
        if (kind != detail::kind_of<T>()) mismatch("values of another type");
        const std::uint64_t size = length();
        if (size != values.size()) {
            mismatch(std::to_string(size) + " values where " + std::to_string(values.size()) + " were expected");
        }
        payload(values.data(), values.size_bytes());
    }
    void text(std::string& text)
    {
        record(detail::record_kind::text);
        const std::uint64_t size = length();
        if (size > payload_left_) mismatch("a text longer than the file");
        text.assign(std::size_t(size), '\0');
        payload(text.data(), text.size());
    }

    // Every record has been read: a checkpoint with more in it was saved by
    // another program or configuration.
    void finish()
    {
        if (payload_left_ != 0) {
            fail("has " + std::to_string(payload_left_) +
                 " bytes left after its last section: it was saved by another program or configuration");
        }
    }

private:
    void record(detail::record_kind expected)
    {
        detail::record_kind kind{};
        payload(&kind, 1);
        if (kind != expected) {
            mismatch(std::string(detail::describe(kind)) + " where " + detail::describe(expected) + " was expected");
        }
    }
    std::uint64_t length()
    {
        std::uint64_t value = 0;
        payload(&value, sizeof value);
        return value;
    }
    void payload(void* data, std::size_t size)
    {
        if (size > payload_left_) mismatch("a record that runs past the end of the payload");
        read_exact(data, size);
        payload_left_ -= size;
    }
    void read_exact(void* data, std::size_t size)
    {
        if (size > 0 && std::fread(data, 1, size, file_.get()) != size) fail_read();
    }

    [[noreturn]] void mismatch(const std::string& what)
    {
        fail("section '" + section_ + "': found " + what +
             "; it was saved by another program or another configuration");
    }
    [[noreturn]] void fail_read()
    {
        fail(std::ferror(file_.get()) != 0 ? "could not be read (" + std::string(std::strerror(errno)) + ")"
                                           : "ended unexpectedly");
    }
    [[noreturn]] void fail(const std::string& what) const
    {
        throw checkpoint_error("checkpoint '" + path_ + "' " + what + ".");
    }
    static std::string hex(std::uint64_t value)
    {
        char text[19];
        std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
        return text;
    }

    std::string path_;
    detail::file_handle file_;
    std::uint64_t payload_left_ = 0;
    std::string section_ = "(none)";
};

static_assert(state_archive<checkpoint_writer> && state_archive<checkpoint_reader>);

} // namespace petra
