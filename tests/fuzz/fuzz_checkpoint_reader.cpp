// checkpoint_reader under libFuzzer, loading a pipeline and its parameters
// as a resumed run does. Each input is read twice: as it is (the reader's
// checks of length, checksum, version and signature), and repaired, with
// the header's length, this network's signature and the checksum made to
// fit, so that mutations reach the records behind the checksum. Every input
// must end in a checkpoint_error, in the pipeline's refusal of a state its
// schedule never reaches, or in a loaded pipeline that then trains a
// micro-batch (or reports that its loss is not finite, as training does).
// Anything else (a crash, another exception, a sanitizer report, a hang, an
// allocation over -malloc_limit_mb) is a bug.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <petra/train/checkpoint.hpp>

#include "fuzz/fuzz_support.hpp"

namespace {

using namespace petra;

// The 32-byte header: magic, version, byte order, signature at byte 16,
// payload length at byte 24; the CRC-32 in the last 4 bytes.
std::vector<std::uint8_t> repaired(const std::uint8_t* data, std::size_t size)
{
    std::vector<std::uint8_t> bytes(data, data + size);
    if (bytes.size() < detail::checkpoint_header_bytes + 4) return bytes;
    const std::uint64_t signature = fuzz::network::signature;
    const std::uint64_t payload = bytes.size() - detail::checkpoint_header_bytes - 4;
    std::memcpy(bytes.data() + 16, &signature, 8);
    std::memcpy(bytes.data() + 24, &payload, 8);
    const std::uint32_t crc = detail::crc32_update(0, bytes.data(), bytes.size() - 4);
    std::memcpy(bytes.data() + bytes.size() - 4, &crc, 4);
    return bytes;
}

void load(const std::string& path)
{
    static const test::micro_batches data(1, fuzz::options.batch, /*seed=*/3);
    auto parameters = fuzz::network::make_parameters<float>(/*seed=*/1);
    fuzz::pipeline pipeline(parameters, test::plain_sgd, test::constant_rate, fuzz::options);
    try {
        checkpoint_reader in(path, fuzz::network::signature);
        pipeline.transfer_state(in);
        parameters.transfer_state(in);
        in.finish();
    } catch (const checkpoint_error&) {
        return; // a clear refusal
    } catch (const std::runtime_error& error) {
        // The pipeline's own refusal of a state its schedule never reaches
        // (the file is sound, its content inconsistent).
        if (std::string_view(error.what()).starts_with("pipeline checkpoint: ")) return;
        throw;
    }
    // A checkpoint that loads resumes: the pipeline trains on. Its values
    // may be any floats (the checksum was repaired), and a loss that is not
    // finite is reported as in any training run.
    try {
        pipeline.feed(data.images[0], data.labels[0]);
        pipeline.drain();
    } catch (const std::runtime_error& error) {
        if (std::string_view(error.what()).find("is not finite") == std::string_view::npos) throw;
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    const std::string path = fuzz::scratch_directory() + "/input.checkpoint";
    fuzz::write_file(path, data, size);
    load(path);
    const std::vector<std::uint8_t> fixed = repaired(data, size);
    fuzz::write_file(path, fixed.data(), fixed.size());
    load(path);
    return 0;
}
