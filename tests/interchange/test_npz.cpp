// NumPy .npz files (interchange/npz_format.hpp, interchange/npz.hpp): a
// network's weights round trip bit for bit, in float and in double; the same
// weights give the same bytes; dtypes convert; and every kind of bad file is
// refused with one sentence naming the array, leaving the parameters as
// they were.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include <petra/core.hpp>
#include <petra/interchange/npz.hpp>

using namespace petra;

namespace {

using net = reference_network<>;
using small = network<input<1, 4, 4>, stem<chain<conv2d<1, 8>, batch_norm<8>, relu>>,
                      additive_coupling<residual_function<4>>, classifier_head<8, 3>>;

std::string scratch(const std::string& name)
{
    const auto directory = std::filesystem::temp_directory_path() / "petra_test_npz";
    std::filesystem::create_directories(directory);
    return (directory / name).string();
}

std::vector<std::byte> bytes_of(const std::string& path)
{
    std::ifstream in(path, std::ios::binary);
    const std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<std::byte> bytes(chars.size());
    std::memcpy(bytes.data(), chars.data(), chars.size());
    return bytes;
}

void write_bytes(const std::string& path, const std::vector<std::byte>& bytes)
{
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

// Parameters and running statistics that differ from a fresh network's.
template <class Network, class T>
network_parameters<Network, T> trained_looking(std::uint64_t seed)
{
    auto parameters = Network::template make_parameters<T>(seed);
    for (std::size_t i = 0; i < Network::state_count; ++i) {
        parameters.state()[i] = T(0.25) + T(i % 7) / T(3); // positive, so variances stay variances
    }
    for (std::size_t i = 0; i < Network::parameter_count; i += 5) parameters.values()[i] += T(0.125);
    return parameters;
}

template <class Network, class T>
bool identical(const network_parameters<Network, T>& a, const network_parameters<Network, T>& b)
{
    return std::memcmp(a.values().data(), b.values().data(), a.values().size_bytes()) == 0 &&
           std::memcmp(a.state().data(), b.state().data(), a.state().size_bytes()) == 0;
}

// The message of what `load` raises, or "" if it raises nothing.
template <class Load>
std::string refusal(Load&& load)
{
    try {
        load();
    } catch (const std::runtime_error& error) {
        return error.what();
    }
    return "";
}

// The weights of `small` written to an archive with `change` applied to the
// arrays: change(name, values, shape) may alter values and shape, or return
// false to leave the array out.
template <class Change>
std::string small_archive_with(const std::string& name, Change&& change)
{
    const auto parameters = trained_looking<small, float>(3);
    npz_writer out(scratch(name));
    for (const named_array& array : small::parameter_names()) {
        const std::span<const float> all =
            array.role == array_role::parameter ? parameters.values() : parameters.state();
        std::vector<float> values(all.begin() + std::ptrdiff_t(array.offset),
                                  all.begin() + std::ptrdiff_t(array.offset + array.size()));
        std::vector<std::size_t> shape(array.extents.begin(), array.extents.begin() + std::ptrdiff_t(array.rank));
        if (!change(array.name.view(), values, shape)) continue;
        out.add(array.name.view(), std::span<const float>(values), std::span<const std::size_t>(shape));
    }
    out.commit();
    return scratch(name);
}

} // namespace

TEST_CASE("the reference network's weights round trip bit for bit, in float and in double")
{
    const auto saved = trained_looking<net, float>(1);
    save_npz(scratch("float.npz"), saved);
    auto loaded = net::make_parameters<float>(2);
    CHECK_FALSE(identical(saved, loaded));
    load_npz(scratch("float.npz"), loaded);
    CHECK(identical(saved, loaded));

    const auto saved_double = trained_looking<net, double>(1);
    save_npz(scratch("double.npz"), saved_double);
    auto loaded_double = net::make_parameters<double>(2);
    load_npz(scratch("double.npz"), loaded_double);
    CHECK(identical(saved_double, loaded_double));

    // A view of the caller's arrays loads as well.
    std::vector<float> values(net::parameter_count), state(net::state_count);
    load_npz(scratch("float.npz"), network_parameters_view<net, float>(std::span<float, net::parameter_count>(values),
                                                                       std::span<float, net::state_count>(state)));
    CHECK(std::memcmp(values.data(), saved.values().data(), saved.values().size_bytes()) == 0);
    CHECK(std::memcmp(state.data(), saved.state().data(), saved.state().size_bytes()) == 0);
}

TEST_CASE("the same weights give the same bytes, and every named array is in the file with its shape")
{
    const auto parameters = trained_looking<net, float>(1);
    save_npz(scratch("first.npz"), parameters);
    save_npz(scratch("second.npz"), network_parameters_view<net, const float>(parameters));
    CHECK(bytes_of(scratch("first.npz")) == bytes_of(scratch("second.npz")));

    const npz_file file(scratch("first.npz"));
    CHECK(file.archive().size() == net::parameter_names().size());
    for (const named_array& array : net::parameter_names()) {
        INFO(std::string(array.name.view()));
        const std::vector<std::size_t> shape = file.shape(array.name.view());
        CHECK(shape ==
              std::vector<std::size_t>(array.extents.begin(), array.extents.begin() + std::ptrdiff_t(array.rank)));
        std::vector<float> values(array.size());
        file.read(array.name.view(), std::span<float>(values));
        const std::span<const float> all =
            array.role == array_role::parameter ? parameters.values() : parameters.state();
        CHECK(std::memcmp(values.data(), all.data() + array.offset, values.size() * sizeof(float)) == 0);
    }
    // No partial file is left behind.
    for (const auto& entry :
         std::filesystem::directory_iterator(std::filesystem::path(scratch("first.npz")).parent_path())) {
        CHECK(entry.path().string().find(".partial.") == std::string::npos);
    }
}

TEST_CASE("float64 files load into float parameters rounded, float32 files into double parameters exactly")
{
    const auto saved_double = trained_looking<small, double>(4);
    save_npz(scratch("small_double.npz"), saved_double);
    auto as_float = small::make_parameters<float>(5);
    load_npz(scratch("small_double.npz"), as_float);
    for (std::size_t i = 0; i < small::parameter_count; ++i) {
        CHECK(as_float.values()[i] == static_cast<float>(saved_double.values()[i]));
    }

    const auto saved_float = trained_looking<small, float>(4);
    save_npz(scratch("small_float.npz"), saved_float);
    auto as_double = small::make_parameters<double>(5);
    load_npz(scratch("small_float.npz"), as_double);
    for (std::size_t i = 0; i < small::state_count; ++i) {
        CHECK(as_double.state()[i] == static_cast<double>(saved_float.state()[i]));
    }
}

TEST_CASE("bad files are refused with one sentence naming the array, and change nothing")
{
    auto parameters = trained_looking<small, float>(7);
    const auto before = trained_looking<small, float>(7);
    const auto refuses = [&](const std::string& path, const std::string& expected) {
        INFO(path);
        const std::string message = refusal([&] { load_npz(path, parameters); });
        CHECK(message.find(expected) != std::string::npos);
        CHECK(message.find(path) != std::string::npos);
        CHECK(identical(parameters, before));
        return message;
    };

    refuses(small_archive_with("missing.npz",
                               [](std::string_view name, auto&, auto&) { return name != "blocks.1.f.4.running_var"; }),
            "has no array 'blocks.1.f.4.running_var' (shape [4]), which the network needs");
    refuses(small_archive_with("short.npz",
                               [](std::string_view name, auto& values, auto& shape) {
                                   if (name == "blocks.2.f.1.bias") {
                                       values.resize(10);
                                       shape = {10};
                                   }
                                   return true;
                               }),
            "holds the array 'blocks.2.f.1.bias' of shape [10]; the network's is [3]");
    refuses(small_archive_with("reshaped.npz",
                               [](std::string_view name, auto&, auto& shape) {
                                   if (name == "blocks.1.f.0.weight") shape = {4, 4, 9};
                                   return true;
                               }),
            "holds the array 'blocks.1.f.0.weight' of shape [4, 4, 9]; the network's is [4, 4, 3, 3]");
    {
        const std::string good = small_archive_with("good.npz", [](auto, auto&, auto&) { return true; });
        std::vector<std::byte> bytes = bytes_of(good);
        // An array the network does not have: a file with one more.
        npz_writer out(scratch("unknown.npz"));
        const npz_file file(good);
        file.archive().for_each([&](const npz_array& array) {
            std::vector<float> values(array.size());
            copy_values(array, std::span<float>(values));
            out.add(array.name, std::span<const float>(values), array.shape());
        });
        const std::vector<float> three{1, 2, 3};
        out.add("blocks.1.f.2.weight", std::span<const float>(three), {3});
        out.commit();
        refuses(scratch("unknown.npz"), "holds an array 'blocks.1.f.2.weight' that the network does not have");

        // Truncated anywhere: the directory is gone.
        write_bytes(scratch("truncated.npz"),
                    std::vector<std::byte>(bytes.begin(), bytes.begin() + std::ptrdiff_t(bytes.size() / 2)));
        refuses(scratch("truncated.npz"), "is truncated, or is not an .npz file");
        // One value flipped: the member's checksum.
        std::vector<std::byte> flipped = bytes;
        flipped[200] ^= std::byte{1};
        write_bytes(scratch("flipped.npz"), flipped);
        refuses(scratch("flipped.npz"), "is corrupted (the array 'blocks.0.f.0.weight' does not match its checksum)");
        // Compressed members (numpy.savez_compressed): method 8 in the first directory entry.
        std::size_t directory = 0;
        for (std::size_t at = 0; at + 4 <= bytes.size(); ++at) {
            if (detail::load_little(bytes.data() + at, 4) == detail::zip_central_signature) {
                directory = at;
                break;
            }
        }
        REQUIRE(directory > 0);
        std::vector<std::byte> compressed = bytes;
        compressed[directory + 10] = std::byte{8};
        write_bytes(scratch("compressed.npz"), compressed);
        refuses(scratch("compressed.npz"), "holds the array 'blocks.0.f.0.weight' compressed (numpy.savez_compressed)");
        // A dtype petra does not read: '<f4' becomes '<i4' in the first member's header.
        std::vector<std::byte> integers = bytes;
        const std::string_view text(reinterpret_cast<const char*>(integers.data()), integers.size());
        const std::size_t descr = text.find("'<f4'");
        REQUIRE(descr != std::string_view::npos);
        integers[descr + 2] = std::byte{'i'};
        write_bytes(scratch("integers.npz"), integers);
        refuses(scratch("integers.npz"), "is corrupted (the array 'blocks.0.f.0.weight' does not match its checksum)");
        // With its checksum repaired (in the local header and the directory
        // entry), the header's dtype is what is refused.
        const std::size_t data_at = detail::zip_local_header_bytes + detail::load_little(integers.data() + 26, 2) +
                                    detail::load_little(integers.data() + 28, 2);
        const std::uint32_t crc =
            detail::crc32_update(0, integers.data() + data_at, detail::load_little(integers.data() + 18, 4));
        for (const std::size_t at : {std::size_t{14}, directory + 16}) std::memcpy(integers.data() + at, &crc, 4);
        write_bytes(scratch("integers.npz"), integers);
        refuses(scratch("integers.npz"),
                "holds the array 'blocks.0.f.0.weight', which has dtype '<i4'; petra reads float32 ('<f4') and "
                "float64 ('<f8')");
        // Not a zip at all.
        write_bytes(scratch("text.npz"), std::vector<std::byte>(64, std::byte{'x'}));
        refuses(scratch("text.npz"), "is truncated, or is not an .npz file");
        write_bytes(scratch("tiny.npz"), std::vector<std::byte>(3, std::byte{0}));
        refuses(scratch("tiny.npz"), "is too short to be an .npz file (3 bytes)");
    }
    refuses(scratch("does_not_exist.npz"), "cannot be opened");
}

TEST_CASE("an archive in memory: arrays found by name, duplicates and dtypes refused")
{
    const std::vector<float> values{1.5f, -2.0f, 3.25f, 4.0f, 5.0f, 6.0f};
    const std::vector<double> wide{0.1, 0.2};
    {
        npz_writer out(scratch("arrays.npz"));
        out.add("matrix", std::span<const float>(values), {2, 3});
        out.add("vector", std::span<const double>(wide), {2});
        out.add("scalar", std::span<const float>(values).first(1), {});
        CHECK_THROWS_WITH_AS(out.add("matrix", std::span<const float>(values), {6}),
                             "npz_writer: the array 'matrix' twice.", std::invalid_argument);
        CHECK_THROWS_AS(out.add("wrong", std::span<const float>(values), {4}), std::invalid_argument);
        out.commit();
    }
    const std::vector<std::byte> bytes = bytes_of(scratch("arrays.npz"));
    const npz_archive_view archive(bytes, "arrays");
    CHECK(archive.size() == 3);
    npz_array matrix;
    REQUIRE(archive.find("matrix", matrix));
    CHECK(matrix.dtype == npy_dtype::float32);
    CHECK(matrix.rank == 2);
    CHECK(matrix.extents[0] == 2);
    CHECK(matrix.extents[1] == 3);
    std::vector<double> read(6);
    copy_values(matrix, std::span<double>(read));
    CHECK(read == std::vector<double>{1.5, -2.0, 3.25, 4.0, 5.0, 6.0});
    const npz_array vector = archive.at("vector");
    CHECK(vector.dtype == npy_dtype::float64);
    std::vector<double> read_wide(2);
    copy_values(vector, std::span<double>(read_wide));
    CHECK(read_wide == wide);
    CHECK(archive.at("scalar").rank == 0);
    CHECK(archive.at("scalar").size() == 1);
    npz_array absent;
    CHECK_FALSE(archive.find("absent", absent));
    CHECK(refusal([&] { (void)archive.at("absent"); }) == "npz file 'arrays' has no array 'absent'.");

    // Two members of one name: the second renamed in its local header and
    // its directory entry ("vector" -> "matrix" has the same length... use
    // "scalar" -> "matrix", six letters each).
    std::vector<std::byte> twice = bytes;
    std::string_view text(reinterpret_cast<const char*>(twice.data()), twice.size());
    for (std::size_t at = text.find("scalar.npy"); at != std::string_view::npos; at = text.find("scalar.npy", at + 1)) {
        std::memcpy(twice.data() + at, "matrix", 6);
    }
    CHECK(refusal([&] { npz_archive_view duplicate(twice, "twice"); }) ==
          "npz file 'twice' holds the array 'matrix' twice.");
}
