// An MPI pipeline's errors reach the caller through raise_error's path
// (error.hpp): built without exceptions, a refused call ends in the error
// handler the program installed, with the error's kind and message, on the
// rank that made it. Run under mpiexec by expect_failure.sh:
//   mpi_error_handler fit    a pipeline of 2 stages on 3 ranks (every rank refuses)
//   mpi_error_handler feed   rank 0, which feeds, is given no images
#include <cstdio>
#include <cstdlib>
#include <string>

#include <mpi.h>

#include <petra/mpi/pipeline.hpp>
#include <petra/mpi/session.hpp>
#include <petra/petra.hpp>

#include "pipeline/pipeline_support.hpp"

namespace {

[[noreturn]] void end_rank(petra::error_kind kind, const char* message)
{
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    std::fprintf(stderr, "rank %d: error handler: %s: %s\n", rank, petra::error_kind_name(kind), message);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 3);
    std::abort(); // MPI_Abort does not return
}

} // namespace

int main(int argc, char** argv)
{
    petra::set_error_handler(end_rank);
    petra::mpi_session mpi(argc, argv);
    const std::string mode = argc > 1 ? argv[1] : "";
    petra::mpi_pipeline<petra::test::pipeline_network, petra::test::cuts_of<2>, petra::sgd<float>> pipeline(
        MPI_COMM_WORLD, 1, petra::test::plain_sgd, petra::test::constant_rate, {.batch = 4});
    if (mode == "feed") pipeline.feed(); // every rank without data, rank 0 too
    std::printf("rank %d: no error\n", mpi.rank());
    return 0;
}
