// What the fuzz targets share: a private directory for the files they hand
// to the parsers (both read paths, not memory), and the small network whose
// checkpoints they read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <system_error>

#include "pipeline/pipeline_support.hpp"

namespace petra::fuzz {

// The pipeline a checkpoint is saved from and loaded into: the pipeline
// tests' network in 2 stages, micro-batches of 4, k = 2 (so that gradient
// sums are in flight too).
using network = test::pipeline_network;
using pipeline = sequential_pipeline<network, test::cuts_of<2>, sgd<float>>;
inline constexpr pipeline_options options{.batch = 4, .accumulation = 2};

// A directory of this process's own, made once, removed at exit.
inline const std::string& scratch_directory()
{
    struct owned_directory {
        std::string path;
        owned_directory()
        {
            // In memory where there is /dev/shm: a disk file rewritten per input
            // makes the file system flush it, which costs more than the parser.
            std::string pattern =
                std::filesystem::is_directory("/dev/shm") ? "/dev/shm/petra_fuzz_XXXXXX" : "/tmp/petra_fuzz_XXXXXX";
            char* name = pattern.data();
            if (::mkdtemp(name) == nullptr) throw std::runtime_error("cannot make a scratch directory");
            path = name;
        }
        ~owned_directory()
        {
            std::error_code ignored;
            std::filesystem::remove_all(path, ignored);
        }
    };
    static const owned_directory directory;
    return directory.path;
}

inline void write_file(const std::string& path, const std::uint8_t* data, std::size_t size)
{
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), std::streamsize(size));
    if (!out) throw std::runtime_error(path + ": cannot be written");
}

} // namespace petra::fuzz
