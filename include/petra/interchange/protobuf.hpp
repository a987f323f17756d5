// The protocol-buffer wire format, written and read by hand (interchange
// floor): enough to write a message whose schema the caller knows, and to
// read its fields back. It knows nothing of any schema (onnx.hpp knows
// ONNX's).
//
// A message is a sequence of fields, each a key (field number << 3 | wire
// type) as a varint, then its value: a varint (integers, enums, bools), 4
// little-endian bytes (float), or a varint length then that many bytes
// (strings, bytes, nested messages, packed repeated scalars). A repeated
// field is the same field written again. A negative int64 is written as the
// varint of its two's complement, 10 bytes.
//
//   protobuf::message dimension;
//   dimension.string(2, "batch");                  // dim_param = "batch"
//   protobuf::message shape;
//   shape.nested(1, dimension).nested(1, other); // repeated Dimension dim = 1
//   const std::string& bytes = shape.bytes();
//
//   for (const protobuf::field& f : protobuf::fields(bytes)) ...  // f.number, f.value or f.bytes
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <petra/error.hpp>

namespace petra::protobuf {

// How a field's value is laid out after its key.
enum class wire_type : std::uint8_t { varint = 0, fixed64 = 1, length_delimited = 2, fixed32 = 5 };

// A message being written: its fields in the order they are added. bytes()
// is the message's encoding, which a caller writes to a file or nests in
// another message.
class message {
public:
    message& varint(std::uint32_t number, std::uint64_t value)
    {
        key(number, wire_type::varint);
        append_varint(value);
        return *this;
    }
    // int32, int64 and enum fields: negative values as their 64-bit two's
    // complement (what protobuf writes for int32 and int64 alike).
    message& integer(std::uint32_t number, std::int64_t value)
    {
        return varint(number, static_cast<std::uint64_t>(value));
    }
    message& float32(std::uint32_t number, float value)
    {
        key(number, wire_type::fixed32);
        append_little_endian(bytes_, std::bit_cast<std::uint32_t>(value), 4);
        return *this;
    }
    message& raw_bytes(std::uint32_t number, std::string_view value)
    {
        key(number, wire_type::length_delimited);
        append_varint(value.size());
        bytes_.append(value);
        return *this;
    }
    message& string(std::uint32_t number, std::string_view value) { return raw_bytes(number, value); }
    message& nested(std::uint32_t number, const message& inner) { return raw_bytes(number, inner.bytes()); }

    const std::string& bytes() const { return bytes_; }
    std::string& bytes() { return bytes_; }

    // The low `bytes` bytes of value, little-endian, appended to out (4 for
    // a float's bits, 8 for an int64): the layout of raw tensor data and of
    // fixed-size fields whatever the machine's byte order.
    static void append_little_endian(std::string& out, std::uint64_t value, int bytes)
    {
        for (int byte = 0; byte < bytes; ++byte) out.push_back(static_cast<char>((value >> (8 * byte)) & 0xff));
    }

private:
    void key(std::uint32_t number, wire_type type)
    {
        append_varint((std::uint64_t{number} << 3) | static_cast<std::uint64_t>(type));
    }
    void append_varint(std::uint64_t value)
    {
        // Seven bits a byte, lowest first; the high bit says another follows.
        do {
            const auto low = static_cast<unsigned char>(value & 0x7f);
            value >>= 7;
            bytes_.push_back(static_cast<char>(value != 0 ? (low | 0x80) : low));
        } while (value != 0);
    }

    std::string bytes_;
};

// One field read back: its number and wire type, and its value: `value` for
// a varint, a fixed32 or a fixed64 (the raw bits), `bytes` (a view into the
// message read) for a length-delimited field.
struct field {
    std::uint32_t number = 0;
    wire_type type = wire_type::varint;
    std::uint64_t value = 0;
    std::string_view bytes;

    float as_float() const { return std::bit_cast<float>(static_cast<std::uint32_t>(value)); }
    std::int64_t as_integer() const { return static_cast<std::int64_t>(value); }
};

namespace detail {

inline std::uint64_t read_varint(std::string_view data, std::size_t& at)
{
    std::uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (at >= data.size())
            raise_error(error_kind::runtime_error, "protobuf: a varint runs past the end of the message.");
        const auto byte = static_cast<unsigned char>(data[at++]);
        value |= std::uint64_t{byte & 0x7fu} << shift;
        if ((byte & 0x80) == 0) return value;
    }
    raise_error(error_kind::runtime_error, "protobuf: a varint longer than 10 bytes.");
}

inline std::uint64_t read_little_endian(std::string_view data, std::size_t& at, std::size_t bytes)
{
    if (data.size() - at < bytes)
        raise_error(error_kind::runtime_error, "protobuf: a fixed-size value runs past the end.");
    std::uint64_t value = 0;
    for (std::size_t byte = 0; byte < bytes; ++byte) {
        value |= std::uint64_t{static_cast<unsigned char>(data[at++])} << (8 * byte);
    }
    return value;
}

} // namespace detail

// The fields of an encoded message, in order (a repeated field once per
// value). Throws std::runtime_error for bytes that are not a message: a
// truncated value, an unknown wire type.
inline std::vector<field> fields(std::string_view data)
{
    std::vector<field> out;
    std::size_t at = 0;
    while (at < data.size()) {
        const std::uint64_t key = detail::read_varint(data, at);
        field f;
        f.number = static_cast<std::uint32_t>(key >> 3);
        f.type = static_cast<wire_type>(key & 7);
        switch (f.type) {
        case wire_type::varint: f.value = detail::read_varint(data, at); break;
        case wire_type::fixed64: f.value = detail::read_little_endian(data, at, 8); break;
        case wire_type::fixed32: f.value = detail::read_little_endian(data, at, 4); break;
        case wire_type::length_delimited: {
            const std::uint64_t length = detail::read_varint(data, at);
            if (length > data.size() - at)
                raise_error(error_kind::runtime_error, "protobuf: a field runs past the end.");
            f.bytes = data.substr(at, length);
            at += length;
            break;
        }
        default:
            raise_error(error_kind::runtime_error, "protobuf: an unknown wire type " + std::to_string(key & 7) + ".");
        }
        out.push_back(f);
    }
    return out;
}

} // namespace petra::protobuf
