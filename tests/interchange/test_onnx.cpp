// ONNX export (interchange/onnx.hpp) read back in C++: the protobuf wire
// format against hand-encoded bytes, then a model's fields decoded (its
// opset, its input and output, its nodes in an order a runtime can run,
// every named array an initializer holding the parameters), and the file
// export_onnx writes. check_onnx.py runs exported models end to end.
#include <doctest/doctest.h>

#include <bit>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <petra/core.hpp>
#include <petra/interchange/onnx.hpp>

using namespace petra;

namespace {

// Every field numbered `number` of an encoded message.
std::vector<protobuf::field> all(std::string_view message, std::uint32_t number)
{
    std::vector<protobuf::field> out;
    for (const protobuf::field& f : protobuf::fields(message)) {
        if (f.number == number) out.push_back(f);
    }
    return out;
}

// The one field numbered `number`.
protobuf::field one(std::string_view message, std::uint32_t number)
{
    const std::vector<protobuf::field> found = all(message, number);
    REQUIRE(found.size() == 1);
    return found[0];
}

std::vector<std::string> strings(std::string_view message, std::uint32_t number)
{
    std::vector<std::string> out;
    for (const protobuf::field& f : all(message, number)) out.emplace_back(f.bytes);
    return out;
}

// A small network of four block kinds: stem, coupling, pixel_unshuffle,
// head.
using small = network<input<1, 4, 4>, stem<chain<conv2d<1, 4>, batch_norm<4>, relu>>, additive_coupling<conv2d<2, 2>>,
                      pixel_unshuffle, head<chain<global_average_pool, dense<16, 3>>>>;

// Parameters and state with a distinct value at every place, so that an
// array read from the wrong offset shows.
template <class T>
network_parameters<small, T> distinct_parameters()
{
    auto parameters = small::make_parameters<T>(1);
    for (std::size_t i = 0; i < small::parameter_count; ++i) parameters.values()[i] = T(0.001) * T(i) + T(0.1) / T(3);
    for (std::size_t i = 0; i < small::state_count; ++i) parameters.state()[i] = T(1) + T(0.01) * T(i) + T(0.1) / T(7);
    return parameters;
}

// The dimensions of a ValueInfoProto's tensor type: a dim_param as its
// text, a dim_value as its number.
std::vector<std::string> dimensions(std::string_view value_info)
{
    const protobuf::field tensor = one(one(value_info, 2).bytes, 1);
    CHECK(one(tensor.bytes, 1).value == 1); // float32
    std::vector<std::string> out;
    for (const protobuf::field& dim : all(one(tensor.bytes, 2).bytes, 1)) {
        const protobuf::field value = protobuf::fields(dim.bytes).at(0);
        out.push_back(value.number == 2 ? std::string(value.bytes) : std::to_string(value.value));
    }
    return out;
}

template <class T>
void check_initializers(const network_parameters<small, T>& parameters, std::string_view graph)
{
    std::set<std::string> seen;
    for (const named_array& array : small::parameter_names()) {
        const std::string name(array.name.view());
        bool found = false;
        for (const protobuf::field& initializer : all(graph, 5)) {
            if (one(initializer.bytes, 8).bytes != name) continue;
            found = true;
            std::vector<std::uint64_t> dims;
            for (const protobuf::field& dim : all(initializer.bytes, 1)) dims.push_back(dim.value);
            CHECK(dims == std::vector<std::uint64_t>(array.extents.begin(), array.extents.begin() + array.rank));
            CHECK(one(initializer.bytes, 2).value == 1);
            const std::string_view raw = one(initializer.bytes, 9).bytes;
            REQUIRE(raw.size() == 4 * array.size());
            const std::span<const T> source =
                array.role == array_role::parameter ? parameters.values() : parameters.state();
            for (std::size_t i = 0; i < array.size(); ++i) {
                std::uint32_t bits = 0;
                for (std::size_t byte = 0; byte < 4; ++byte) {
                    bits |= std::uint32_t(static_cast<unsigned char>(raw[4 * i + byte])) << (8 * byte);
                }
                CHECK(std::bit_cast<float>(bits) == static_cast<float>(source[array.offset + i]));
            }
        }
        CHECK_MESSAGE(found, name);
    }
}

} // namespace

TEST_CASE("protobuf: fields encode as the wire format says and decode back")
{
    protobuf::message inner;
    inner.varint(1, 150);
    CHECK(inner.bytes() == std::string("\x08\x96\x01", 3)); // the example of protobuf's documentation

    protobuf::message message;
    message.integer(2, -1).float32(3, 1.5f).string(4, "images").nested(5, inner).varint(6, 0);
    const std::string expected = std::string("\x10") + std::string(9, '\xff') + '\x01' // -1: ten bytes
                                 + "\x1d" + std::string("\x00\x00\xc0\x3f", 4)         // 1.5f, little-endian
                                 + "\x22\x06images" + "\x2a\x03\x08\x96\x01" + std::string("\x30\x00", 2);
    CHECK(message.bytes() == expected);

    const std::vector<protobuf::field> fields = protobuf::fields(message.bytes());
    REQUIRE(fields.size() == 5);
    CHECK(fields[0].number == 2);
    CHECK(fields[0].as_integer() == -1);
    CHECK(fields[1].type == protobuf::wire_type::fixed32);
    CHECK(fields[1].as_float() == 1.5f);
    CHECK(fields[2].bytes == "images");
    CHECK(one(fields[3].bytes, 1).value == 150);
    CHECK(fields[4].value == 0);

    CHECK_THROWS_AS(protobuf::fields(message.bytes().substr(0, 5)), std::runtime_error);     // inside the varint
    CHECK_THROWS_AS(protobuf::fields(std::string("\x22\x07images", 8)), std::runtime_error); // one byte short
}

TEST_CASE("onnx_model_bytes: opset 13, images in and logits out, nodes in order, the arrays by their names")
{
    const auto parameters = distinct_parameters<float>();
    const std::string model = onnx_model_bytes(parameters);
    CHECK(one(model, 1).value == onnx_ir_version);
    CHECK(one(model, 2).bytes == "petra");
    const protobuf::field opset = one(model, 8);
    CHECK(one(opset.bytes, 1).bytes == "");
    CHECK(one(opset.bytes, 2).value == 13);

    const std::string_view graph = one(model, 7).bytes;
    const protobuf::field input = one(graph, 11), output = one(graph, 12);
    CHECK(one(input.bytes, 1).bytes == "images");
    CHECK(dimensions(input.bytes) == std::vector<std::string>{"batch", "1", "4", "4"});
    CHECK(one(output.bytes, 1).bytes == "logits");
    CHECK(dimensions(output.bytes) == std::vector<std::string>{"batch", "3"});

    // Each block as onnx.hpp's table says, in order; each node reads only
    // the images, initializers and earlier outputs.
    std::set<std::string> defined{"images"};
    for (const protobuf::field& initializer : all(graph, 5))
        defined.insert(std::string(one(initializer.bytes, 8).bytes));
    std::vector<std::string> operators;
    for (const protobuf::field& node : all(graph, 1)) {
        operators.emplace_back(one(node.bytes, 4).bytes);
        for (const std::string& name : strings(node.bytes, 1)) CHECK_MESSAGE(defined.contains(name), name);
        for (const std::string& name : strings(node.bytes, 2)) CHECK_MESSAGE(defined.insert(name).second, name);
    }
    CHECK(defined.contains("logits"));
    CHECK(operators == std::vector<std::string>{"Conv", "BatchNormalization", "Relu", "Split",      // stem
                                                "Conv", "Add",                                      // coupling
                                                "Reshape", "Transpose", "Reshape",                  // unshuffle x
                                                "Reshape", "Transpose", "Reshape",                  // unshuffle x~
                                                "Concat", "GlobalAveragePool", "Flatten", "Gemm"}); // head

    // A few attributes: the batch norm's epsilon, the 3x3 convolution's
    // padding, the dense layer's transposed weights, the unshuffle's order.
    const auto attribute = [&](std::string_view node_name, std::string_view name) {
        for (const protobuf::field& node : all(graph, 1)) {
            if (one(node.bytes, 3).bytes != node_name) continue;
            for (const protobuf::field& a : all(node.bytes, 5)) {
                if (one(a.bytes, 1).bytes == name) return std::string(a.bytes);
            }
        }
        FAIL("no attribute ", name, " of ", node_name);
        return std::string();
    };
    CHECK(one(attribute("blocks.0.f.1/BatchNormalization", "epsilon"), 2).as_float() == 1e-5f);
    std::vector<std::uint64_t> pads, perm;
    for (const protobuf::field& f : all(attribute("blocks.0.f.0/Conv", "pads"), 8)) pads.push_back(f.value);
    CHECK(pads == std::vector<std::uint64_t>{1, 1, 1, 1});
    for (const protobuf::field& f : all(attribute("blocks.2/first/Transpose", "perm"), 8)) perm.push_back(f.value);
    CHECK(perm == std::vector<std::uint64_t>{0, 1, 3, 5, 2, 4});
    CHECK(one(attribute("blocks.3.f.1/Gemm", "transB"), 3).value == 1);

    check_initializers(parameters, graph);
}

TEST_CASE("onnx_model_bytes: double parameters become float32, from a view alike")
{
    const auto parameters = distinct_parameters<double>();
    const std::string model = onnx_model_bytes(parameters);
    check_initializers(parameters, one(model, 7).bytes);
    CHECK(onnx_model_bytes(network_parameters_view<small, const double>(parameters)) == model);
}

TEST_CASE("export_onnx: the model's bytes in the file, no partial file left; a path that cannot be written throws")
{
    const auto parameters = distinct_parameters<float>();
    const std::filesystem::path directory = std::filesystem::temp_directory_path() / "petra_test_onnx";
    std::filesystem::remove_all(directory);
    std::filesystem::create_directories(directory);
    const std::filesystem::path path = directory / "small.onnx";
    std::ofstream(path) << "an older file";
    export_onnx(parameters, path.string());
    std::ifstream file(path, std::ios::binary);
    const std::string written((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
    CHECK(written == onnx_model_bytes(parameters));
    CHECK(std::distance(std::filesystem::directory_iterator(directory), std::filesystem::directory_iterator()) == 1);

    const std::string missing = (directory / "no such directory" / "small.onnx").string();
    const std::string expected = "export_onnx: '" + missing + ".partial.";
    CHECK_THROWS_WITH_AS(export_onnx(parameters, missing), doctest::Contains(expected.c_str()), std::runtime_error);
    std::filesystem::remove_all(directory);
}
