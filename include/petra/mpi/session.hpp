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
// A rank that hosts several stages runs them on threads that all call MPI,
// which needs MPI_THREAD_MULTIPLE: what the session asks for by default.
// Given less, such a rank runs its stages on the caller's thread.
#pragma once

#include <mpi.h>

#include <petra/error.hpp>

namespace petra {

class mpi_session {
public:
    mpi_session(int& argc, char**& argv, int wanted = MPI_THREAD_MULTIPLE)
    {
        if (MPI_Init_thread(&argc, &argv, wanted, &thread_level_) != MPI_SUCCESS) {
            raise_error(error_kind::runtime_error, "MPI could not be initialised.");
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
    // The thread support MPI gives (MPI_THREAD_SINGLE to MPI_THREAD_MULTIPLE).
    int thread_level() const { return thread_level_; }

private:
    int rank_ = 0;
    int size_ = 1;
    int thread_level_ = MPI_THREAD_SINGLE;
};

} // namespace petra
