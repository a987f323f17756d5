// Training on threads without exceptions or RTTI. `training train`: PETRA in
// 3 stages on 3 threads learns a circle, then is destroyed in the middle of
// an epoch (every stage first finishes the ticks it was granted, then joins);
// exit status 0 when the accuracy passed 80%. `training failure`: a
// micro-batch whose loss is not finite; the error handler runs on the last
// stage's thread with the message that names the stage and the micro-batch,
// prints "handler: <kind>: <message>" and exits with status 4.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <petra/petra.hpp>

using namespace petra;

namespace {

[[noreturn]] void report_and_exit(error_kind kind, const char* message)
{
    std::fprintf(stderr, "handler: %s: %s\n", error_kind_name(kind), message);
    std::_Exit(4);
}

using mixing = chain<dense<16, 64>, relu, dense<64, 16>>;
using net =
    network<input<2>, stem<chain<dense<2, 32>, relu>>, repeated<4, additive_coupling<mixing>>, head<dense<32, 2>>>;
constexpr auto cuts = partition<net, 3>();

} // namespace

int main(int argc, char** argv)
{
    const bool failure = argc == 2 && std::strcmp(argv[1], "failure") == 0;
    set_error_handler(report_and_exit);
    std::mt19937_64 generator(1);
    std::vector<float> points(1024 * 2);
    std::vector<std::int32_t> labels(1024);
    for (std::size_t n = 0; n < 1024; ++n) {
        points[2 * n] = uniform_real(generator, -1.5f, 1.5f);
        points[2 * n + 1] = uniform_real(generator, -1.5f, 1.5f);
        labels[n] = std::hypot(points[2 * n], points[2 * n + 1]) < 1.0f;
    }
    if (failure) points[2 * 64 + 1] = std::numeric_limits<float>::infinity(); // in micro-batch 1

    auto parameters = net::make_parameters<float>(1);
    const learning_rate_schedule schedule{.peak = 0.002, .warmup_steps = 16};
    thread_pipeline<net, cuts, sgd<float>> pipeline(parameters, sgd_options{.momentum = 0.9, .nesterov = true},
                                                    schedule, {.batch = 64});
    epoch_statistics epoch;
    for (int e = 0; e < 10; ++e) {
        for (std::size_t first = 0; first < 1024; first += 64) {
            pipeline.feed(points.data() + 2 * first, labels.data() + first);
        }
        epoch = pipeline.drain();
    }
    for (std::size_t first = 0; first < 5 * 64; first += 64) {
        pipeline.feed(points.data() + 2 * first, labels.data() + first); // then destroyed mid-epoch
    }
    std::printf("training without exceptions or RTTI: %.1f%% training accuracy after 10 epochs\n",
                100.0 * epoch.accuracy());
    return !failure && epoch.accuracy() > 0.8 ? 0 : 1;
}
