// The fuzzers' seed corpora, real files made by the library itself:
//   make_seeds DIRECTORY
// writes DIRECTORY/idx/ (a small IDX file of 3 x 4 x 5 bytes, plain and
// gzip-compressed, and a one-dimensional one) and DIRECTORY/checkpoint/ (a
// checkpoint of the fuzz pipeline saved in the middle of an epoch, with
// kept inputs, gradient sums and messages in flight, and one saved before
// any micro-batch), and DIRECTORY/npz/ (the fuzz network's weights, and an
// archive of a float64 matrix, a float32 vector and a scalar).
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <zlib.h>

#include <petra/interchange/npz.hpp>
#include <petra/train/checkpoint.hpp>

#include "fuzz/fuzz_support.hpp"

namespace {

using namespace petra;

std::vector<std::uint8_t> idx_bytes(const std::vector<std::uint32_t>& dimensions)
{
    std::vector<std::uint8_t> bytes{0, 0, 0x08, std::uint8_t(dimensions.size())};
    std::size_t count = 1;
    for (const std::uint32_t extent : dimensions) {
        for (int shift = 24; shift >= 0; shift -= 8) bytes.push_back(std::uint8_t(extent >> shift));
        count *= extent;
    }
    for (std::size_t i = 0; i < count; ++i) bytes.push_back(std::uint8_t(i * 37 % 256));
    return bytes;
}

void write_gzip(const std::string& path, const std::vector<std::uint8_t>& bytes)
{
    gzFile file = gzopen(path.c_str(), "wb");
    if (file == nullptr || gzwrite(file, bytes.data(), unsigned(bytes.size())) != int(bytes.size())) {
        throw std::runtime_error(path + ": cannot be written");
    }
    gzclose(file);
}

void save(const std::string& path, std::size_t micro_batches)
{
    const test::micro_batches data(micro_batches, fuzz::options.batch, /*seed=*/5);
    auto parameters = fuzz::network::make_parameters<float>(/*seed=*/1);
    fuzz::pipeline pipeline(parameters, test::plain_sgd, test::constant_rate, fuzz::options);
    for (std::size_t m = 0; m < micro_batches; ++m) pipeline.feed(data.images[m], data.labels[m]);
    checkpoint_writer out(path, fuzz::network::signature);
    pipeline.transfer_state(out);
    parameters.transfer_state(out);
    out.commit();
}

} // namespace

int main(int argc, char** argv)
{
    if (argc != 2) {
        std::fprintf(stderr, "usage: make_seeds DIRECTORY\n");
        return 2;
    }
    const std::filesystem::path directory = argv[1];
    std::filesystem::create_directories(directory / "idx");
    std::filesystem::create_directories(directory / "checkpoint");
    std::filesystem::create_directories(directory / "npz");
    const std::vector<std::uint8_t> images = idx_bytes({3, 4, 5}), labels = idx_bytes({7});
    fuzz::write_file((directory / "idx" / "images.idx").string(), images.data(), images.size());
    fuzz::write_file((directory / "idx" / "labels.idx").string(), labels.data(), labels.size());
    write_gzip((directory / "idx" / "images.idx.gz").string(), images);
    save((directory / "checkpoint" / "mid_epoch.checkpoint").string(), 3);
    save((directory / "checkpoint" / "fresh.checkpoint").string(), 0);
    save_npz((directory / "npz" / "weights.npz").string(), fuzz::network::make_parameters<float>(/*seed=*/1));
    {
        npz_writer arrays((directory / "npz" / "arrays.npz").string());
        const std::vector<double> matrix{1, 2, 3, 4, 5, 6};
        const std::vector<float> vector{0.5f, -1.5f};
        arrays.add("matrix", std::span<const double>(matrix), {2, 3});
        arrays.add("vector", std::span<const float>(vector), {2});
        arrays.add("scalar", std::span<const float>(vector).first(1), {});
        arrays.commit();
    }
    std::printf("make_seeds: seed corpora in %s\n", directory.c_str());
    return 0;
}
