// The .npz reader under libFuzzer, on the bytes in memory (the path files
// take too, after reading them whole). Each input is
//   1. loaded into the fuzz network's parameters: it must end in a refusal
//      (runtime_error) that left every parameter and running statistic as
//      it was, or in parameters that hold exactly the archive's values;
//   2. read as any archive, every array's values copied out;
//   3. parsed as an .npy header's dictionary, which in a file sits behind
//      its member's CRC-32, out of reach of most mutations otherwise.
// Anything else (a crash, another exception, a sanitizer report, a hang, an
// allocation over -malloc_limit_mb) is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string_view>
#include <vector>

#include <petra/interchange/npz.hpp>

#include "fuzz/fuzz_support.hpp"

namespace {

using namespace petra;

[[noreturn]] void broken(const char* what)
{
    std::fprintf(stderr, "fuzz_npz_reader: %s\n", what);
    std::abort();
}

void load_into_network(std::span<const std::byte> bytes)
{
    using network = fuzz::network;
    static const auto fresh = network::make_parameters<float>(/*seed=*/1);
    auto parameters = network::make_parameters<float>(/*seed=*/1);
    try {
        load_npz(bytes, network_parameters_view<network, float>(parameters), "input");
    } catch (const std::runtime_error&) {
        if (std::memcmp(parameters.values().data(), fresh.values().data(), parameters.values().size_bytes()) != 0 ||
            std::memcmp(parameters.state().data(), fresh.state().data(), parameters.state().size_bytes()) != 0) {
            broken("a refused file changed the parameters");
        }
        return;
    }
    // Loaded: every named array holds the archive's values.
    const npz_archive_view archive(bytes);
    for (const named_array& named : network::parameter_names()) {
        const npz_array array = archive.at(named.name.view());
        std::vector<float> expected(array.size());
        copy_values(array, std::span<float>(expected));
        const std::span<const float> all =
            named.role == array_role::parameter ? parameters.values() : parameters.state();
        if (std::memcmp(expected.data(), all.data() + named.offset, expected.size() * sizeof(float)) != 0) {
            broken("a loaded array differs from the file's");
        }
    }
}

void read_any_archive(std::span<const std::byte> bytes)
{
    try {
        const npz_archive_view archive(bytes);
        std::size_t visited = 0;
        archive.for_each([&](const npz_array& array) {
            if (array.data.size() != array.size() * npy_dtype_bytes(array.dtype))
                broken("an array's size disagrees with its bytes");
            std::vector<double> values(array.size());
            copy_values(array, std::span<double>(values));
            ++visited;
        });
        if (visited != archive.size()) broken("visited another number of arrays than the archive holds");
    } catch (const std::runtime_error&) {
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
    load_into_network(bytes);
    read_any_archive(bytes);
    npz_array array;
    const std::string problem =
        detail::parse_npy_dictionary(std::string_view(reinterpret_cast<const char*>(data), size), array);
    if (problem.empty() && array.rank > npy_max_rank) broken("accepted too many dimensions");
    return 0;
}
