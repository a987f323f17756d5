// MPI for the length of a program (for code that links MPI): initialised
// by the constructor, finalised by the destructor, unless the program
// already ended it.
//
//   int main(int argc, char** argv)
//   {
//       petra::mpi_session mpi(argc, argv);
//       ... mpi.rank(), mpi.size(), an mpi_pipeline over MPI_COMM_WORLD ...
//   }
//
// The pipeline calls MPI from the thread that drives it only
// (MPI_THREAD_FUNNELED), which is what the session asks for by default.
#pragma once

#include <mpi.h>

#include <stdexcept>
#include <string>

namespace petra {

class mpi_session {
public:
    mpi_session(int& argc, char**& argv, int required = MPI_THREAD_FUNNELED)
    {
        int provided = 0;
        if (MPI_Init_thread(&argc, &argv, required, &provided) != MPI_SUCCESS) {
            throw std::runtime_error("MPI could not be initialised.");
        }
        if (provided < required) {
            MPI_Finalize();
            throw std::runtime_error("this MPI library gives thread support level " + std::to_string(provided) +
                                     ", below the " + std::to_string(required) + " asked for.");
        }
        MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
        MPI_Comm_size(MPI_COMM_WORLD, &size_);
    }
    mpi_session(const mpi_session&) = delete;
    mpi_session& operator=(const mpi_session&) = delete;
    ~mpi_session()
    {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized) MPI_Finalize();
    }

    int rank() const { return rank_; }
    int size() const { return size_; }

private:
    int rank_ = 0;
    int size_ = 1;
};

} // namespace petra
