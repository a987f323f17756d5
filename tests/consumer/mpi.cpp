// A consumer of petra::mpi: PETRA's two stages of a small network on the
// ranks this program is launched on (one, started without mpiexec: the
// rank then hosts both stages on threads), trained for a few micro-batches,
// must end with the parameters the sequential simulator computes, bit for
// bit. A consumer build proves the headers, the include paths and that the
// component brings MPI along.
#include <petra/core.hpp>
#include <petra/mpi.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

using namespace petra;

using small_network = network<input<1, 8, 8>, stem<chain<conv2d<1, 8>, batch_norm<8>, relu>>,
                              additive_coupling<residual_function<4>>, classifier_head<8, 3>>;
constexpr auto cuts = partition<small_network, 2>();

int main(int argc, char** argv)
{
    mpi_session mpi(argc, argv);
    const pipeline_options options{.batch = 4};
    const sgd_options settings{.momentum = 0.9, .nesterov = true, .weight_decay = 5e-4};
    const auto rate = [](std::size_t) { return 0.05; };
    constexpr std::size_t micro_batches = 6;
    std::vector<float> images(options.batch * small_network::input::size);
    std::vector<std::int32_t> labels(options.batch);
    const auto fill = [&](std::size_t m) {
        for (std::size_t i = 0; i < images.size(); ++i) images[i] = float((i * 7 + m * 13) % 17) / 17.0f - 0.5f;
        for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = std::int32_t((i + m) % 3);
    };

    auto simulated = small_network::make_parameters<float>(1);
    {
        sequential_pipeline<small_network, cuts, sgd<float>> pipeline(simulated, settings, rate, options);
        for (std::size_t m = 0; m < micro_batches; ++m) {
            fill(m);
            pipeline.feed(images.data(), labels.data());
        }
        pipeline.drain();
    }
    auto gathered = small_network::make_parameters<float>(0);
    {
        mpi_pipeline<small_network, cuts, sgd<float>> pipeline(MPI_COMM_WORLD, 1, settings, rate, options);
        for (std::size_t m = 0; m < micro_batches; ++m) {
            fill(m);
            if (pipeline.feeds()) pipeline.feed(images.data(), labels.data());
            else pipeline.feed();
        }
        pipeline.drain();
        pipeline.gather_parameters(mpi.rank() == 0 ? &gathered : nullptr);
    }
    if (mpi.rank() == 0) {
        if (!std::ranges::equal(simulated.values(), gathered.values())) {
            std::printf("consumer (mpi): the ranks' parameters differ from the simulator's\n");
            return 1;
        }
        std::printf("consumer (mpi): petra %s trains on %d MPI rank(s) as the simulator does\n", PETRA_VERSION_STRING,
                    mpi.size());
    }
    return 0;
}
