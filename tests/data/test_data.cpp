// The data floor: IDX files written by the test, valid (plain and gzip) and
// broken in every way the reader names; datasets built from them; the order
// of batches in an epoch.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <zlib.h>

#include <doctest/doctest.h>

#include <petra/data/augmentation.hpp>
#include <petra/data/dataset.hpp>
#include <petra/data/idx.hpp>

using namespace petra;

namespace {

// A directory of its own for each test case, removed at the end.
struct scratch_directory {
    std::filesystem::path path;
    scratch_directory()
        : path(std::filesystem::temp_directory_path() /
               ("petra_data_test_" + std::to_string(std::random_device{}()) + "_" + std::to_string(counter()++)))
    {
        std::filesystem::create_directories(path);
    }
    ~scratch_directory() { std::filesystem::remove_all(path); }
    std::string file(const std::string& name) const { return (path / name).string(); }
    static int& counter()
    {
        static int value = 0;
        return value;
    }
};

std::vector<unsigned char> idx_bytes(std::vector<std::uint32_t> dims, const std::vector<unsigned char>& values,
                                     unsigned char type = 0x08)
{
    std::vector<unsigned char> bytes{0, 0, type, static_cast<unsigned char>(dims.size())};
    for (std::uint32_t d : dims) {
        for (int shift : {24, 16, 8, 0}) bytes.push_back(static_cast<unsigned char>(d >> shift));
    }
    bytes.insert(bytes.end(), values.begin(), values.end());
    return bytes;
}

void write_plain(const std::string& path, const std::vector<unsigned char>& bytes)
{
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

void write_gzip(const std::string& path, const std::vector<unsigned char>& bytes)
{
    gzFile file = gzopen(path.c_str(), "wb");
    REQUIRE(file != nullptr);
    if (!bytes.empty()) REQUIRE(gzwrite(file, bytes.data(), unsigned(bytes.size())) == int(bytes.size()));
    gzclose(file);
}

std::vector<unsigned char> pixels(std::size_t count)
{
    std::vector<unsigned char> values(count);
    for (std::size_t i = 0; i < count; ++i) values[i] = static_cast<unsigned char>((i * 37) % 256);
    return values;
}

// The message of the data_error read_idx throws for path.
std::string error_of(const std::string& path)
{
    try {
        read_idx(path);
    } catch (const data_error& error) {
        return error.what();
    }
    return "(no error)";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

} // namespace

TEST_CASE("read_idx: plain and gzip files give their dimensions and values")
{
    scratch_directory directory;
    const auto values = pixels(3 * 4 * 5);
    write_plain(directory.file("images.idx"), idx_bytes({3, 4, 5}, values));
    write_gzip(directory.file("images.idx.gz"), idx_bytes({3, 4, 5}, values));
    for (const char* name : {"images.idx", "images.idx.gz"}) {
        CAPTURE(name);
        const auto array = read_idx(directory.file(name));
        REQUIRE(array.dimension() == 3);
        CHECK(array.shape()[0] == 3);
        CHECK(array.shape()[1] == 4);
        CHECK(array.shape()[2] == 5);
        CHECK(std::equal(array.begin(), array.end(), values.begin()));
        CHECK(array(2, 3, 4) == values[2 * 20 + 3 * 5 + 4]);
    }
}

TEST_CASE("read_idx: every broken file gives its own error, naming the file")
{
    scratch_directory directory;
    const auto values = pixels(2 * 3 * 3);
    const auto valid = idx_bytes({2, 3, 3}, values);

    write_plain(directory.file("empty.idx"), {});
    write_gzip(directory.file("truncated.idx.gz"), std::vector<unsigned char>(valid.begin(), valid.end() - 5));
    auto wrong_magic = valid;
    wrong_magic[0] = 0x12;
    write_plain(directory.file("magic.idx"), wrong_magic);
    write_plain(directory.file("extra.idx"), idx_bytes({2, 3, 2}, values)); // dimensions too small for the data
    write_plain(directory.file("plain.idx.gz"), valid);                     // named .gz, not gzip
    write_plain(directory.file("type.idx"), idx_bytes({2, 3, 3}, values, 0x0D));
    write_plain(directory.file("rank.idx"), idx_bytes({}, values));
    write_plain(directory.file("header.idx"), std::vector<unsigned char>(valid.begin(), valid.begin() + 9));
    write_plain(directory.file("zero.idx"), idx_bytes({2, 0, 3}, {}));
    // 18 values announced, 10 MB inflated from a few kilobytes: reading
    // stops soon after the 18th value.
    write_gzip(directory.file("bomb.idx.gz"), idx_bytes({2, 3, 3}, std::vector<unsigned char>(10 << 20, 0)));
    // Dimensions whose product overflows 64 bits: 2^22 x 2^21 x 2^21.
    write_gzip(directory.file("huge.idx.gz"), idx_bytes({1u << 22, 1u << 21, 1u << 21}, {}));
    // A gzip stream with its middle overwritten.
    write_gzip(directory.file("corrupt.idx.gz"), idx_bytes({200, 20}, pixels(4000)));
    {
        std::fstream file(directory.file("corrupt.idx.gz"), std::ios::in | std::ios::out | std::ios::binary);
        file.seekp(20);
        const std::string garbage(40, '\xff');
        file.write(garbage.data(), std::streamsize(garbage.size()));
    }

    // A gzip file cut in the middle of its compressed stream.
    write_gzip(directory.file("cut.idx.gz"), idx_bytes({200, 20}, pixels(4000)));
    std::filesystem::resize_file(directory.file("cut.idx.gz"),
                                 std::filesystem::file_size(directory.file("cut.idx.gz")) / 2);

    const struct {
        const char* name;
        const char* says;
    } cases[] = {
        {"missing.idx", "cannot open the file"},
        {"empty.idx", "the file is empty"},
        {"truncated.idx.gz", "truncated: its dimensions need 18 values, it holds 13"},
        {"magic.idx", "not an IDX file"},
        {"extra.idx", "6 or more bytes past the values its dimensions describe"},
        {"huge.idx.gz", "more than 2^32 values"},
        {"bomb.idx.gz", "or more bytes past the values"},
        {"plain.idx.gz", "not gzip data"},
        {"type.idx", "IDX value type 0x0D is not supported"},
        {"rank.idx", "with 0 dimensions"},
        {"header.idx", "truncated in its header"},
        {"zero.idx", "dimension 1 is 0"},
        {"corrupt.idx.gz", "corrupt compressed data (invalid"},
        {"cut.idx.gz", "truncated"},
    };
    for (const auto& refusal : cases) {
        const char* const name = refusal.name;
        const char* const says = refusal.says;
        const std::string message = error_of(directory.file(name));
        INFO(name << ": " << message);
        CHECK(contains(message, directory.file(name) + ": "));
        CHECK(contains(message, says));
        if (std::string(name) == "bomb.idx.gz") {
            // Bytes past the end, as read before stopping: far fewer than 10 MB.
            const std::size_t past = std::stoul(message.substr(message.find(": ") + 2));
            CHECK(past < (1u << 20));
        }
    }
}

TEST_CASE("load_idx_dataset: normalised images, checked labels")
{
    scratch_directory directory;
    const auto values = pixels(4 * 2 * 3);
    write_gzip(directory.file("images.gz"), idx_bytes({4, 2, 3}, values));
    write_gzip(directory.file("labels.gz"), idx_bytes({4}, {3, 0, 9, 1}));
    const auto dataset =
        load_idx_dataset(directory.file("images.gz"), directory.file("labels.gz"), 10, fashion_mnist_normalisation);
    REQUIRE(dataset.size() == 4);
    CHECK(dataset.image_size() == 6);
    CHECK(dataset.images.shape()[1] == 1);
    CHECK(dataset.labels(2) == 9);
    for (std::size_t i = 0; i < values.size(); ++i) {
        const float expected = (float(values[i]) / 255.0f - 0.2860f) / 0.3530f;
        CHECK(dataset.images.data()[i] == doctest::Approx(expected).epsilon(1e-6));
    }

    write_gzip(directory.file("three_labels.gz"), idx_bytes({3}, {1, 2, 3}));
    CHECK_THROWS_WITH_AS(load_idx_dataset(directory.file("images.gz"), directory.file("three_labels.gz"), 10,
                                          fashion_mnist_normalisation),
                         doctest::Contains("3 labels for the 4 images"), data_error);
    CHECK_THROWS_WITH_AS(
        load_idx_dataset(directory.file("images.gz"), directory.file("labels.gz"), 5, fashion_mnist_normalisation),
        doctest::Contains("label 9 of example 2 is not below the 5 classes"), data_error);
    CHECK_THROWS_WITH_AS(
        load_idx_dataset(directory.file("labels.gz"), directory.file("labels.gz"), 10, fashion_mnist_normalisation),
        doctest::Contains("images need 3 dimensions"), data_error);
}

TEST_CASE("batch_order: a permutation per epoch, reproducible, full batches only")
{
    batch_order order(103, 10, 7);
    CHECK(order.batches() == 10);
    order.shuffle(0);
    std::vector<std::size_t> first;
    for (std::size_t b = 0; b < order.batches(); ++b) {
        const auto batch = order.batch(b);
        first.insert(first.end(), batch.begin(), batch.end());
    }
    // 100 distinct examples of the 103.
    CHECK(std::set<std::size_t>(first.begin(), first.end()).size() == 100);
    CHECK(*std::max_element(first.begin(), first.end()) < 103);
    // The same epoch gives the same order, whatever came before; another
    // epoch another order.
    order.shuffle(5);
    order.shuffle(0);
    CHECK(std::equal(first.begin(), first.end(), order.batch(0).begin()));
    batch_order again(103, 10, 7);
    again.shuffle(0);
    CHECK(std::equal(first.begin(), first.begin() + 10, again.batch(0).begin()));
    again.shuffle(1);
    CHECK(!std::equal(first.begin(), first.begin() + 10, again.batch(0).begin()));
    CHECK_THROWS_AS(batch_order(5, 6, 1), std::invalid_argument);
}

TEST_CASE("gather_batch: examples copied in the order asked")
{
    labelled_images dataset;
    dataset.images = xt::xtensor<float, 4>::from_shape({3, 1, 1, 2});
    dataset.labels = xt::xtensor<std::int32_t, 1>::from_shape({3});
    for (std::size_t i = 0; i < 6; ++i) dataset.images.data()[i] = float(i);
    for (std::size_t n = 0; n < 3; ++n) dataset.labels(n) = std::int32_t(10 + n);
    const std::vector<std::size_t> indices{2, 0};
    std::vector<float> images(4);
    std::vector<std::int32_t> labels(2);
    gather_batch(dataset, indices, images.data(), labels.data());
    CHECK(images == std::vector<float>{4, 5, 0, 1});
    CHECK(labels == std::vector<std::int32_t>{12, 10});
}

TEST_CASE("augment_batch: shifts within the padding, mirrors, reproducible from the seed")
{
    // One 1 x 3 x 4 image with distinct values 1..12.
    std::vector<float> image(12);
    for (std::size_t i = 0; i < 12; ++i) image[i] = float(i + 1);
    std::vector<float> scratch;

    // Flip only: each run is either the image or its mirror, and both occur.
    bool saw_original = false, saw_mirror = false;
    std::mt19937_64 generator(3);
    for (int run = 0; run < 20; ++run) {
        auto copy = image;
        augment_batch(copy.data(), 1, 1, 3, 4, {.padding = 0, .flip = true}, generator, scratch);
        std::vector<float> mirror(12);
        for (std::size_t y = 0; y < 3; ++y)
            for (std::size_t x = 0; x < 4; ++x) mirror[y * 4 + x] = image[y * 4 + (3 - x)];
        saw_original = saw_original || copy == image;
        saw_mirror = saw_mirror || copy == mirror;
        CHECK((copy == image || copy == mirror));
    }
    CHECK(saw_original);
    CHECK(saw_mirror);

    // Shift only: every value that remains is the input's, displaced by at
    // most the padding, and the rest are zeros.
    for (int run = 0; run < 20; ++run) {
        auto copy = image;
        augment_batch(copy.data(), 1, 1, 3, 4, {.padding = 1, .flip = false, .fill = -1.0f}, generator, scratch);
        for (std::size_t y = 0; y < 3; ++y) {
            for (std::size_t x = 0; x < 4; ++x) {
                const float value = copy[y * 4 + x];
                if (value == -1.0f) continue; // the padding's fill
                const std::size_t source = std::size_t(value) - 1;
                CHECK(std::abs(int(source / 4) - int(y)) <= 1);
                CHECK(std::abs(int(source % 4) - int(x)) <= 1);
            }
        }
    }

    // The same seed, the same augmentation.
    std::mt19937_64 first(9), second(9);
    auto a = image, b = image;
    augment_batch(a.data(), 1, 1, 3, 4, {.padding = 2, .flip = true}, first, scratch);
    augment_batch(b.data(), 1, 1, 3, 4, {.padding = 2, .flip = true}, second, scratch);
    CHECK(a == b);
}
