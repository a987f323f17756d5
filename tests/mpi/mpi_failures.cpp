// A job that fails on purpose, run under mpiexec by expect_failure.sh:
//   mpi_failures throw   a stage throws at micro-batch 5 (its loss is not finite)
//   mpi_failures kill    rank 1 is killed by SIGKILL at micro-batch 5
//   mpi_failures fit     a pipeline of 2 stages on however many ranks were launched
// Every rank trains the same 2-stage network on 20 micro-batches.
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <string>

#include <petra/mpi.hpp>
#include <petra/petra.hpp>

#include "pipeline/pipeline_support.hpp"

using namespace petra;

int main(int argc, char** argv)
{
    mpi_session mpi(argc, argv);
    const std::string mode = argc > 1 ? argv[1] : "";
    test::micro_batches data(20, 4, 1);
    if (mode == "throw") {
        for (float& value : data.images[5]) value = std::numeric_limits<float>::quiet_NaN();
    }
    try {
        mpi_pipeline<test::pipeline_network, test::cuts_of<2>, sgd<float>> pipeline(MPI_COMM_WORLD, 1, test::plain_sgd,
                                                                                    test::constant_rate, {.batch = 4});
        for (std::size_t m = 0; m < data.images.size(); ++m) {
            if (mode == "kill" && m == 5 && mpi.rank() == 1) ::kill(::getpid(), SIGKILL);
            pipeline.feed(data.images[m], data.labels[m]);
        }
        const epoch_statistics epoch = pipeline.drain();
        if (mpi.rank() == 0) std::printf("trained %zu micro-batches\n", epoch.micro_batches);
    } catch (const std::invalid_argument& error) {
        std::fprintf(stderr, "rank %d: %s\n", mpi.rank(), error.what());
        return 2;
    }
    return 0;
}
