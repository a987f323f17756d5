// The doctest main of the MPI tests: every rank runs every test case (the
// cases are collective), and the program fails when any rank does.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <mpi.h>

#include <petra/mpi/session.hpp>

int main(int argc, char** argv)
{
    petra::mpi_session mpi(argc, argv);
    doctest::Context context(argc, argv);
    int failed = context.run() != 0 ? 1 : 0;
    int any_failed = 0;
    MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return any_failed;
}
