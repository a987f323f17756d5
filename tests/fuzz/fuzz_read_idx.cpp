// read_idx under libFuzzer: any bytes, read as a plain IDX file and as one
// named .gz, must end in a data_error or in an array that holds exactly the
// values the header describes. Anything else (a crash, another exception, a
// sanitizer report, a hang, an allocation over -malloc_limit_mb) is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <petra/data/idx.hpp>

#include "fuzz/fuzz_support.hpp"

namespace {

[[noreturn]] void broken(const char* what)
{
    std::fprintf(stderr, "fuzz_read_idx: %s\n", what);
    std::abort();
}

// A plain file that read_idx accepted holds the header it describes and
// exactly the values the array holds.
void check_plain(const std::uint8_t* data, std::size_t size, const xt::xarray<std::uint8_t>& values)
{
    if (size < 4 || data[0] != 0 || data[1] != 0 || data[2] != 0x08) broken("accepted a wrong magic number");
    const std::size_t rank = data[3];
    if (values.dimension() != rank || rank == 0 || rank > 4) broken("accepted a wrong rank");
    std::size_t count = 1;
    for (std::size_t d = 0; d < rank; ++d) {
        const std::uint8_t* extent = data + 4 + 4 * d;
        const std::size_t expected =
            (std::size_t(extent[0]) << 24) | (std::size_t(extent[1]) << 16) | (std::size_t(extent[2]) << 8) | extent[3];
        if (values.shape()[d] != expected) broken("returned other dimensions than the header's");
        count *= expected;
    }
    const std::size_t header = 4 + 4 * rank;
    if (size != header + count || values.size() != count) broken("accepted a file of the wrong length");
    for (std::size_t i = 0; i < count; ++i) {
        if (values.data()[i] != data[header + i]) broken("returned other values than the file's");
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    const std::string& directory = petra::fuzz::scratch_directory();
    for (const std::string name : {"input.idx", "input.idx.gz"}) {
        const std::string path = directory + "/" + name;
        petra::fuzz::write_file(path, data, size);
        try {
            const xt::xarray<std::uint8_t> values = petra::read_idx(path);
            const bool gzip = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
            if (!gzip) check_plain(data, size, values);
            if (values.size() == 0 || values.dimension() == 0 || values.dimension() > 4) broken("returned no values");
        } catch (const petra::data_error&) {
            // A clear refusal.
        }
    }
    return 0;
}
