// What the MPI tests share: this process's rank and the job's size, the
// test network's pipeline on ranks, and a directory every rank of a
// one-machine job sees.
#pragma once

#include <mpi.h>

#include <unistd.h>

#include <cstddef>
#include <filesystem>
#include <string>

#include <petra/mpi.hpp>

#include "pipeline/pipeline_support.hpp"

namespace petra::test {

inline int world_rank()
{
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    return rank;
}

inline int world_size()
{
    int size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    return size;
}

// The test network in J stages on ranks (pipeline_support.hpp).
template <std::size_t J>
using ranks_pipeline = mpi_pipeline<pipeline_network, cuts_of<J>, sgd<float>>;

// A directory every rank sees (prefix and rank 0's process id in the
// temporary directory), made by rank 0 and removed at the end.
struct shared_directory {
    std::filesystem::path path;

    explicit shared_directory(const std::string& prefix)
    {
        std::string name;
        if (world_rank() == 0) {
            name = (std::filesystem::temp_directory_path() / (prefix + std::to_string(::getpid()))).string();
            std::filesystem::create_directories(name);
        }
        unsigned long long size = name.size();
        MPI_Bcast(&size, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
        name.resize(size);
        MPI_Bcast(name.data(), int(size), MPI_CHAR, 0, MPI_COMM_WORLD);
        path = name;
    }
    ~shared_directory()
    {
        MPI_Barrier(MPI_COMM_WORLD);
        if (world_rank() == 0) std::filesystem::remove_all(path);
    }
    shared_directory(const shared_directory&) = delete;
    shared_directory& operator=(const shared_directory&) = delete;

    std::string file(const std::string& name) const { return (path / name).string(); }
};

} // namespace petra::test
