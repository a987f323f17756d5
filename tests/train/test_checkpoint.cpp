// Checkpoint files: what is written is read back; every single corrupted
// byte, a truncation, another network's signature, another format version,
// a missing file are each refused with their own message; records read in
// another order or of another length are refused; a writer that does not
// commit leaves the previous checkpoint as it was. The checksum is the
// standard CRC-32, computed without zlib (zlib checks it here).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <unistd.h>
#include <vector>

#include <zlib.h>

#include <doctest/doctest.h>

#include <petra/petra.hpp>

#include "support.hpp"

using namespace petra;

namespace {

std::string temporary_path(const std::string& name) { return test::temporary_path(name + ".checkpoint"); }

// What a refusal of a damaged file says: one of the reasons the reader
// gives, never a failure to open it.
bool names_the_damage(const std::string& message)
{
    for (const char* reason :
         {"is corrupted", "is truncated", "is not a petra checkpoint", "has format version", "another byte order"}) {
        if (message.find(reason) != std::string::npos) return true;
    }
    return false;
}

std::vector<char> read_bytes(const std::string& path)
{
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::vector<char>& bytes)
{
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), std::streamsize(bytes.size()));
}

constexpr std::uint64_t signature = 0x1234'5678'9abc'def0ull;

// A little of everything an archive carries.
struct sample_state {
    std::vector<float> floats{1.5f, -2.25f, 3.0f};
    std::vector<double> doubles{0.1, 1e300};
    std::vector<std::int32_t> integers{-7, 0, 9, 11};
    std::string text = "mt19937 state 1 2 3";
    std::size_t steps = 41;
    bool flag = true;

    template <state_archive Archive>
    void transfer_state(Archive& archive)
    {
        archive.section("sample");
        archive.expect(floats.size(), "float count");
        archive.values(std::span<float>(floats));
        archive.values(std::span<double>(doubles));
        archive.values(std::span<std::int32_t>(integers));
        archive.text(text);
        archive.count(steps, 1000);
        transfer_flag(archive, flag);
    }
};

void write_sample(const std::string& path, sample_state state = {})
{
    checkpoint_writer out(path, signature);
    state.transfer_state(out);
    out.commit();
}

} // namespace

TEST_CASE("checkpoint: what is written is read back")
{
    const std::string path = temporary_path("round_trip");
    sample_state written;
    written.floats = {4.0f, 5.0f, -0.0f};
    written.steps = 1000;
    written.flag = false;
    write_sample(path, written);
    sample_state read;
    read.text.clear();
    checkpoint_reader in(path, signature);
    read.transfer_state(in);
    in.finish();
    CHECK(read.floats == written.floats);
    CHECK(read.doubles == written.doubles);
    CHECK(read.integers == written.integers);
    CHECK(read.text == written.text);
    CHECK(read.steps == 1000);
    CHECK(read.flag == false);
    std::remove(path.c_str());
}

TEST_CASE("checkpoint: a network's parameters and an optimizer's velocity come back exactly")
{
    using net = reference_network<>;
    const std::string path = temporary_path("network");
    auto parameters = net::make_parameters<float>(3);
    for (std::size_t i = 0; i < parameters.state().size(); ++i) parameters.state()[i] = float(i) * 0.5f;
    const auto mask = net::weight_mask<float>();
    sgd<float> optimizer({}, mask);
    for (std::size_t i = 0; i < optimizer.velocity().size(); ++i) optimizer.velocity()[i] = float(i % 97) - 48.0f;
    {
        checkpoint_writer out(path, net::signature);
        parameters.transfer_state(out);
        optimizer.transfer_state(out);
        out.commit();
    }
    auto restored = net::make_parameters<float>(4);
    sgd<float> restored_optimizer({}, mask);
    {
        checkpoint_reader in(path, net::signature);
        restored.transfer_state(in);
        restored_optimizer.transfer_state(in);
        in.finish();
    }
    CHECK(std::equal(parameters.values().begin(), parameters.values().end(), restored.values().begin()));
    CHECK(std::equal(parameters.state().begin(), parameters.state().end(), restored.state().begin()));
    CHECK(std::equal(optimizer.velocity().begin(), optimizer.velocity().end(), restored_optimizer.velocity().begin()));

    // One corrupted byte in the middle of the parameters is caught.
    std::vector<char> bytes = read_bytes(path);
    bytes[bytes.size() / 2] ^= 0x01;
    write_bytes(path, bytes);
    CHECK_THROWS_WITH_AS(checkpoint_reader(path, net::signature),
                         doctest::Contains("is corrupted (its checksum does not match its contents)"),
                         checkpoint_error);
    std::remove(path.c_str());
}

TEST_CASE("checkpoint: every single corrupted byte is refused before anything is read")
{
    const std::string path = temporary_path("corrupted");
    write_sample(path);
    const std::vector<char> good = read_bytes(path);
    REQUIRE(good.size() > 100);
    for (std::size_t i = 0; i < good.size(); ++i) {
        for (unsigned char flip : {0x01, 0x80}) {
            std::vector<char> bad = good;
            bad[i] = char(bad[i] ^ flip);
            write_bytes(path, bad);
            CAPTURE(i);
            std::string message;
            try {
                checkpoint_reader refused(path, signature);
            } catch (const checkpoint_error& error) {
                message = error.what();
            }
            CAPTURE(message);
            CHECK(names_the_damage(message));
        }
    }
    // The specific messages of the header's fields.
    auto with_byte = [&](std::size_t index, char value) {
        std::vector<char> bad = good;
        bad[index] = value;
        write_bytes(path, bad);
    };
    with_byte(0, 'X');
    CHECK_THROWS_WITH_AS(checkpoint_reader(path, signature), doctest::Contains("is not a petra checkpoint"),
                         checkpoint_error);
    with_byte(8, 2);
    CHECK_THROWS_WITH_AS(checkpoint_reader(path, signature),
                         doctest::Contains("has format version 2; this build reads version 1"), checkpoint_error);
    with_byte(16, char(good[16] ^ 0x10));
    CHECK_THROWS_WITH_AS(checkpoint_reader(path, signature), doctest::Contains("is corrupted (its checksum"),
                         checkpoint_error);
    std::remove(path.c_str());
}

TEST_CASE("checkpoint: truncated, empty, missing and foreign files are refused with their reason")
{
    const std::string path = temporary_path("refused");
    write_sample(path);
    const std::vector<char> good = read_bytes(path);
    write_bytes(path, std::vector<char>(good.begin(), good.end() - 5));
    CHECK_THROWS_WITH_AS(checkpoint_reader(path, signature), doctest::Contains("is truncated"), checkpoint_error);
    write_bytes(path, std::vector<char>(good.begin(), good.begin() + 20));
    CHECK_THROWS_WITH_AS(checkpoint_reader(path, signature), doctest::Contains("is too short to be a checkpoint"),
                         checkpoint_error);
    write_bytes(path, {});
    CHECK_THROWS_WITH_AS(checkpoint_reader(path, signature), doctest::Contains("(0 bytes)"), checkpoint_error);
    std::vector<char> longer = good;
    longer.push_back('x');
    write_bytes(path, longer);
    CHECK_THROWS_WITH_AS(checkpoint_reader(path, signature), doctest::Contains("is corrupted"), checkpoint_error);
    write_bytes(path, good);
    CHECK_THROWS_WITH_AS(checkpoint_reader(path, signature + 1), doctest::Contains("was written for another network"),
                         checkpoint_error);
    std::remove(path.c_str());
    CHECK_THROWS_WITH_AS(checkpoint_reader(path, signature), doctest::Contains("cannot be opened"), checkpoint_error);
}

TEST_CASE("checkpoint: another network's checkpoint is refused")
{
    using small = network<input<1, 8, 8>, stem<chain<conv2d<1, 8>, batch_norm<8>, relu>>,
                          additive_coupling<residual_function<4>>, classifier_head<8, 3>>;
    using wider = network<input<1, 8, 8>, stem<chain<conv2d<1, 16>, batch_norm<16>, relu>>,
                          additive_coupling<residual_function<8>>, classifier_head<16, 3>>;
    static_assert(small::signature != wider::signature);
    static_assert(small::signature != reference_network<>::signature);
    const std::string path = temporary_path("network_kind");
    auto parameters = small::make_parameters<float>(1);
    {
        checkpoint_writer out(path, small::signature);
        parameters.transfer_state(out);
        out.commit();
    }
    CHECK_THROWS_WITH_AS(checkpoint_reader(path, wider::signature), doctest::Contains("another network"),
                         checkpoint_error);
    // The same network in double: refused by its record.
    auto in_double = small::make_parameters<double>(1);
    checkpoint_reader in(path, small::signature);
    CHECK_THROWS_WITH_AS(in_double.transfer_state(in), doctest::Contains("its bytes per value is 4, here it is 8"),
                         checkpoint_error);
    std::remove(path.c_str());
}

TEST_CASE("checkpoint: records read in another order, length or limit are refused")
{
    const std::string path = temporary_path("records");
    write_sample(path);
    {
        checkpoint_reader in(path, signature);
        CHECK_THROWS_WITH_AS(in.section("other"),
                             doctest::Contains("holds section 'sample' where 'other' was expected"), checkpoint_error);
    }
    {
        checkpoint_reader in(path, signature);
        in.section("sample");
        CHECK_THROWS_WITH_AS(in.expect(4, "float count"),
                             doctest::Contains("section 'sample': its float count is 3, here it is 4"),
                             checkpoint_error);
    }
    {
        checkpoint_reader in(path, signature);
        in.section("sample");
        in.expect(3, "float count");
        std::vector<float> two(2);
        CHECK_THROWS_WITH_AS(in.values(std::span<float>(two)),
                             doctest::Contains("found 3 values where 2 were expected"), checkpoint_error);
    }
    {
        checkpoint_reader in(path, signature);
        in.section("sample");
        in.expect(3, "float count");
        std::vector<double> three(3);
        CHECK_THROWS_WITH_AS(in.values(std::span<double>(three)), doctest::Contains("values of another type"),
                             checkpoint_error);
    }
    {
        sample_state state;
        checkpoint_reader in(path, signature);
        state.transfer_state(in);
        std::size_t more = 0;
        CHECK_THROWS_WITH_AS(in.count(more, 10), doctest::Contains("runs past the end"), checkpoint_error);
    }
    {
        // A count above the reader's limit.
        sample_state state;
        checkpoint_reader in(path, signature);
        in.section("sample");
        in.expect(3, "float count");
        in.values(std::span<float>(state.floats));
        in.values(std::span<double>(state.doubles));
        in.values(std::span<std::int32_t>(state.integers));
        in.text(state.text);
        CHECK_THROWS_WITH_AS(in.count(state.steps, 40), doctest::Contains("the count 41, above the limit 40"),
                             checkpoint_error);
    }
    {
        // Unread records left over.
        checkpoint_reader in(path, signature);
        in.section("sample");
        CHECK_THROWS_WITH_AS(in.finish(), doctest::Contains("bytes left after its last section"), checkpoint_error);
    }
    std::remove(path.c_str());
}

TEST_CASE("checkpoint: a writer that does not commit leaves the previous checkpoint untouched")
{
    const std::string path = temporary_path("atomic");
    write_sample(path);
    const std::vector<char> before = read_bytes(path);
    {
        checkpoint_writer out(path, signature);
        sample_state other;
        other.steps = 3;
        other.transfer_state(out);
        // No commit: as if saving had thrown.
    }
    CHECK(read_bytes(path) == before);
    CHECK(!std::ifstream(path + ".partial." + std::to_string(::getpid())).good());
    // A commit replaces it.
    write_sample(path, sample_state{.steps = 3});
    sample_state read;
    checkpoint_reader in(path, signature);
    read.transfer_state(in);
    CHECK(read.steps == 3);
    std::remove(path.c_str());
    // A directory that does not exist: a clear error, nothing left behind.
    CHECK_THROWS_WITH_AS(checkpoint_writer("no/such/directory/run.checkpoint", signature),
                         doctest::Contains("cannot be written"), checkpoint_error);
}

TEST_CASE("checkpoint: a file cut far short is reported as truncated, an impossible length as corruption")
{
    const std::string path = temporary_path("cut");
    write_sample(path);
    const std::vector<char> good = read_bytes(path);
    write_bytes(path, std::vector<char>(good.begin(), good.begin() + 40));
    CHECK_THROWS_WITH_AS(checkpoint_reader(path, signature), doctest::Contains("is truncated (40 bytes"),
                         checkpoint_error);
    std::vector<char> bad = good;
    for (std::size_t i = 24; i < 32; ++i) bad[i] = char(0xff); // the payload length
    write_bytes(path, bad);
    CHECK_THROWS_WITH_AS(checkpoint_reader(path, signature), doctest::Contains("announces an impossible length"),
                         checkpoint_error);
    std::remove(path.c_str());
}

TEST_CASE("checkpoint: the checksum is zlib's CRC-32, and the file's last four bytes are it")
{
    CHECK(detail::crc32_update(0, "123456789", 9) == 0xCBF43926u);
    std::vector<unsigned char> bytes(70'000);
    std::uint32_t seed = 12345;
    for (unsigned char& byte : bytes) byte = static_cast<unsigned char>((seed = seed * 1664525u + 1013904223u) >> 24);
    for (const std::size_t size : {std::size_t(0), std::size_t(1), std::size_t(3), std::size_t(32), bytes.size()}) {
        CAPTURE(size);
        const auto expected = static_cast<std::uint32_t>(::crc32(0, bytes.data(), uInt(size)));
        CHECK(detail::crc32_update(0, bytes.data(), size) == expected);
        // Split anywhere: continued, and combined from the two parts' CRCs.
        for (const std::size_t cut : {std::size_t(0), size / 3, size}) {
            CAPTURE(cut);
            const std::uint32_t first = detail::crc32_update(0, bytes.data(), cut);
            const std::uint32_t second = detail::crc32_update(0, bytes.data() + cut, size - cut);
            CHECK(detail::crc32_update(first, bytes.data() + cut, size - cut) == expected);
            CHECK(detail::crc32_combine(first, second, size - cut) == expected);
            CHECK(detail::crc32_combine(first, second, size - cut) ==
                  static_cast<std::uint32_t>(::crc32_combine(first, second, z_off_t(size - cut))));
        }
    }

    const std::string path = temporary_path("zlib_crc");
    write_sample(path);
    const std::vector<char> file = read_bytes(path);
    std::filesystem::remove(path);
    REQUIRE(file.size() > 4);
    std::uint32_t stored = 0;
    std::memcpy(&stored, file.data() + file.size() - 4, 4);
    CHECK(stored ==
          static_cast<std::uint32_t>(::crc32(0, reinterpret_cast<const Bytef*>(file.data()), uInt(file.size() - 4))));
}
