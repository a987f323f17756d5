// PETRA's stages on MPI ranks, on the reference network (batch 64, random
// images), under mpiexec:
//
//   mpiexec --bind-to none -n 2 bench_mpi throughput [ROUNDS] [MICRO_BATCHES] [J]
//     J = 2 (default) or 4 stages on threads of rank 0 (rank 1 sleeps
//     meanwhile) against the same J on the 2 ranks (J = 4: two stages per
//     rank, on a thread each), in interleaved rounds of one epoch each, in
//     one run: examples/s per round and the medians' ratio. OpenMPI binds
//     each of 2 ranks to one core by default, which would leave the threads
//     one core: hence --bind-to none (the run warns if rank 0 is confined
//     to fewer cores than the machine has). Then, for J = 2,
//     the bytes each rank sent per tick across each boundary, next to the
//     compile-time figure (header + batch x values x 4 bytes; a backward
//     message holds the rebuilt input and its gradient).
//   mpiexec --bind-to none -n 2 bench_mpi replicas [ROUNDS] [MICRO_BATCHES]
//     PETRA with one stage in 2 replicas, one per rank (global micro-batches
//     of 2 x 64), against data-parallel backprop written the obvious way
//     (exact_backprop on each rank's shard, the gradients gathered and
//     added in rank order as the replicas add them, the same SGD step), and
//     against PETRA with one stage on rank 0 alone (micro-batches of 64;
//     rank 1 sleeps), in interleaved rounds of one epoch each:
//     examples/s per round and the medians' ratios.
//   mpiexec -n 2 bench_mpi link [REPETITIONS]
//     the link between the 2 ranks, as scripts/plan takes it: the one-way
//     time of a message of each size the reference network's J = 2 cut
//     sends (and of a header alone), from ping-pongs of synchronous-mode
//     sends into posted receives, as mpi_channel sends them; medians.
//   mpiexec -n R bench_mpi memory [J]
//     J = 4 (default) on R ranks: each rank trains an epoch of 12
//     micro-batches and reports its peak RSS and what its pipeline holds
//     (parameters, statistics, optimizer state, FIFOs, buffers, channels).
//   mpiexec -n 1 bench_mpi memory-threads [J]
//     the same J on threads in one process (MPI initialised too, so that
//     MPI's own footprint is in both).
// Rank 0 prints markdown tables.
#include <mpi.h>
#include <sched.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <petra/mpi.hpp>
#include <petra/petra.hpp>
#include <petra/random.hpp>

namespace {

using net = petra::reference_network<>;
constexpr std::size_t batch = 64;

struct epoch_data {
    std::vector<petra::owned_batch<float, net::input>> images;
    std::vector<std::vector<std::int32_t>> labels;

    explicit epoch_data(std::size_t count)
    {
        std::mt19937_64 generator(1);
        for (std::size_t m = 0; m < count; ++m) {
            images.emplace_back(batch);
            labels.emplace_back(batch);
            for (float& value : images.back()) value = petra::uniform_float(generator);
            for (auto& value : labels.back()) value = petra::uniform_int(generator, std::int32_t(0), std::int32_t(9));
        }
    }
};

double learning_rate(std::size_t) { return 0.01; }

std::size_t peak_rss_bytes()
{
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return std::size_t(usage.ru_maxrss) * 1024;
}

int world_rank()
{
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    return rank;
}

// A barrier that sleeps while it waits, so that an idle rank leaves its
// core to the others (MPI_Barrier polls).
void sleeping_barrier()
{
    MPI_Request request;
    MPI_Ibarrier(MPI_COMM_WORLD, &request);
    for (int done = 0; !done;) {
        MPI_Test(&request, &done, MPI_STATUS_IGNORE);
        if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
}

template <class Pipeline>
double epoch_seconds(Pipeline& pipeline, const epoch_data& data)
{
    const auto start = std::chrono::steady_clock::now();
    for (std::size_t m = 0; m < data.images.size(); ++m) pipeline.feed(data.images[m], data.labels[m]);
    pipeline.drain();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double median(std::vector<double> values)
{
    std::sort(values.begin(), values.end());
    return values[values.size() / 2];
}

template <std::size_t J>
int throughput(int rounds, std::size_t micro_batches)
{
    constexpr auto cuts = petra::reference_cuts<J>();
    const epoch_data data(micro_batches);
    int ranks = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    if (ranks != 2) {
        if (world_rank() == 0) std::fprintf(stderr, "bench_mpi throughput: run it on 2 ranks (mpiexec -n 2).\n");
        return 2;
    }
    cpu_set_t allowed;
    if (world_rank() == 0 && sched_getaffinity(0, sizeof(allowed), &allowed) == 0 &&
        unsigned(CPU_COUNT(&allowed)) < std::thread::hardware_concurrency()) {
        std::fprintf(stderr,
                     "bench_mpi throughput: rank 0 may run on %d of %u cores, so the threads would share "
                     "them: run under mpiexec --bind-to none.\n",
                     CPU_COUNT(&allowed), std::thread::hardware_concurrency());
    }
    auto parameters = net::make_parameters<float>(1);
    petra::thread_pipeline<net, cuts, petra::sgd<float>> threads(parameters, petra::sgd_options{}, learning_rate,
                                                                 {.batch = batch});
    petra::mpi_pipeline<net, cuts, petra::sgd<float>> ranks_pipeline(MPI_COMM_WORLD, 1, petra::sgd_options{},
                                                                     learning_rate, {.batch = batch});
    std::vector<double> on_threads, on_ranks;
    // A first round of each warms caches and per-thread scratch; not counted.
    for (int round = -1; round < rounds; ++round) {
        if (world_rank() == 0) {
            const double seconds = epoch_seconds(threads, data);
            if (round >= 0) on_threads.push_back(double(micro_batches * batch) / seconds);
        }
        sleeping_barrier();
        const double seconds = epoch_seconds(ranks_pipeline, data);
        if (round >= 0) on_ranks.push_back(double(micro_batches * batch) / seconds);
        sleeping_barrier();
    }
    // Bytes per tick: each boundary's sending rank counts its messages.
    const std::size_t ticks = std::size_t(rounds + 1) * micro_batches; // data messages: one per micro-batch
    std::uint64_t sent[3] = {ranks_pipeline.bytes_sent("forward into stage 1"),
                             ranks_pipeline.bytes_sent("backward into stage 0"), ranks_pipeline.bytes_sent("labels")};
    std::uint64_t total[3] = {0, 0, 0};
    MPI_Reduce(sent, total, 3, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
    if (world_rank() != 0) return 0;

    const auto& groups = ranks_pipeline.stage_groups_of_ranks();
    std::printf("| J = %zu, one epoch of %zu micro-batches of %zu | ", J, micro_batches, batch);
    for (int round = 0; round < rounds; ++round) std::printf("round %d | ", round + 1);
    std::printf("median |\n|---|");
    for (int round = 0; round <= rounds; ++round) std::printf("---:|");
    std::printf("\n| %zu threads, one process (examples/s) | ", J);
    for (double rate : on_threads) std::printf("%.0f | ", rate);
    std::printf("%.0f |\n| 2 ranks, stages %zu-%zu and %zu-%zu (examples/s) | ", median(on_threads), groups[0],
                groups[1] - 1, groups[1], groups[2] - 1);
    for (double rate : on_ranks) std::printf("%.0f | ", rate);
    std::printf("%.0f |\n\nranks / threads (medians): %.3f\n\n", median(on_ranks),
                median(on_ranks) / median(on_threads));
    if constexpr (J == 2) {
        const std::size_t header = petra::mpi_channel<float>::header_bytes;
        const std::size_t boundary = net::profile[cuts[1]].input_values;
        // The end-of-epoch marker travels forward as a header alone, once per epoch.
        const double epochs = double(rounds + 1);
        const std::size_t expected[3] = {header + batch * boundary * sizeof(float),
                                         header + 2 * batch * boundary * sizeof(float),
                                         header + batch * sizeof(std::int32_t)};
        const double markers[3] = {epochs * double(header), 0, 0};
        const char* names[3] = {"forward, stage 0 to 1 (activations)", "backward, stage 1 to 0 (input and gradient)",
                                "labels, rank 0 to the last stage's rank"};
        std::printf("| boundary | bytes per tick, measured | compile-time figure |\n|---|---:|---:|\n");
        for (int k = 0; k < 3; ++k) {
            std::printf("| %s | %.0f | %zu |\n", names[k], (double(total[k]) - markers[k]) / double(ticks),
                        expected[k]);
        }
    }
    return 0;
}

// One-way seconds of a message of `bytes` from rank 0 to rank 1, as half
// the round trip of a synchronous-mode send into a posted receive and the
// same message back; the median of `repetitions` round trips (after one
// not counted). Both ranks spin in MPI_Wait, as nothing else runs.
double one_way_seconds(std::size_t bytes, int repetitions)
{
    std::vector<std::byte> message(bytes), reply(bytes);
    const int rank = world_rank(), peer = 1 - rank;
    std::vector<double> times;
    for (int repetition = -1; repetition < repetitions; ++repetition) {
        MPI_Barrier(MPI_COMM_WORLD);
        const auto start = std::chrono::steady_clock::now();
        MPI_Request requests[2];
        if (rank == 0) {
            MPI_Irecv(reply.data(), int(bytes), MPI_BYTE, peer, 1, MPI_COMM_WORLD, &requests[0]);
            MPI_Issend(message.data(), int(bytes), MPI_BYTE, peer, 0, MPI_COMM_WORLD, &requests[1]);
        } else {
            MPI_Irecv(reply.data(), int(bytes), MPI_BYTE, peer, 0, MPI_COMM_WORLD, &requests[0]);
            MPI_Wait(&requests[0], MPI_STATUS_IGNORE);
            MPI_Issend(message.data(), int(bytes), MPI_BYTE, peer, 1, MPI_COMM_WORLD, &requests[1]);
        }
        MPI_Waitall(2, requests, MPI_STATUSES_IGNORE);
        const double round_trip = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (repetition >= 0) times.push_back(round_trip / 2);
    }
    return median(times);
}

int link(int repetitions)
{
    int ranks = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    if (ranks != 2) {
        if (world_rank() == 0) std::fprintf(stderr, "bench_mpi link: run it on 2 ranks (mpiexec -n 2).\n");
        return 2;
    }
    constexpr auto cuts = petra::reference_cuts<2>();
    const std::size_t header = petra::mpi_channel<float>::header_bytes;
    const std::size_t forward = header + batch * net::profile[cuts[1]].input_values * sizeof(float);
    const std::size_t sizes[3] = {header, forward, 2 * forward - header};
    double seconds[3];
    for (int k = 0; k < 3; ++k) seconds[k] = one_way_seconds(sizes[k], repetitions);
    if (world_rank() != 0) return 0;
    std::printf("| message | bytes | one-way time (us) | bytes / time (GB/s) |\n|---|---:|---:|---:|\n");
    const char* names[3] = {"header alone", "forward, J = 2 cut", "backward, J = 2 cut"};
    for (int k = 0; k < 3; ++k) {
        std::printf("| %s | %zu | %.1f | %.2f |\n", names[k], sizes[k], seconds[k] * 1e6,
                    double(sizes[k]) / seconds[k] / 1e9);
    }
    // The link as scripts/plan takes it: latency from the header alone,
    // bandwidth from the two large messages' difference.
    const double bandwidth = double(sizes[2] - sizes[1]) / (seconds[2] - seconds[1]);
    std::printf("\nlatency %.1f us, bandwidth %.2f GB/s (scripts/plan --latency-us %.1f --bandwidth-gbps %.1f)\n",
                seconds[0] * 1e6, bandwidth / 1e9, seconds[0] * 1e6, bandwidth * 8 / 1e9);
    return 0;
}

// Data-parallel backprop on the ranks of the world, one shard each: the
// gradient of the rank's shard, gathered from every rank and added in rank
// order (add_in_replica_order), then the step on their average.
class data_parallel_backprop {
public:
    explicit data_parallel_backprop(std::size_t ranks)
        : ranks_(ranks), parameters_(net::make_parameters<float>(1)), trainer_(batch),
          optimizer_(petra::sgd_options{}, net::weight_mask<float>()), gradient_(net::parameter_count),
          gathered_(ranks * net::parameter_count)
    {}

    // One step: this rank's shard of the global micro-batch.
    void train(const petra::owned_batch<float, net::input>& images, const std::vector<std::int32_t>& labels)
    {
        std::fill(gradient_.begin(), gradient_.end(), 0.0f);
        trainer_.accumulate_gradient(parameters_, images, labels, gradient_);
        MPI_Allgather(gradient_.data(), int(gradient_.size()), MPI_FLOAT, gathered_.data(), int(gradient_.size()),
                      MPI_FLOAT, MPI_COMM_WORLD);
        petra::add_in_replica_order(
            ranks_,
            [&](std::size_t d) {
                return std::span<const float>(gathered_).subspan(d * gradient_.size(), gradient_.size());
            },
            std::span<float>(gradient_));
        optimizer_.step(parameters_.values(), gradient_, ranks_, learning_rate(0));
    }

private:
    std::size_t ranks_;
    petra::network_parameters<net, float> parameters_;
    petra::exact_backprop<net, float> trainer_;
    petra::sgd<float> optimizer_;
    petra::kernels::aligned_vector<float> gradient_;
    petra::kernels::aligned_vector<float> gathered_;
};

// See the top of the file. Every method trains on micro-batch m of data
// per rank and step: the replicas' global micro-batch m is it twice over
// (each replica feeds one copy), backprop's shard on each rank is it.
int replicas(int rounds, std::size_t micro_batches)
{
    int ranks = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    if (ranks != 2) {
        if (world_rank() == 0) std::fprintf(stderr, "bench_mpi replicas: run it on 2 ranks (mpiexec -n 2).\n");
        return 2;
    }
    constexpr auto one_stage = petra::partition<net, 1>();
    const epoch_data data(micro_batches);
    std::vector<petra::owned_batch<float, net::input>> global_images;
    std::vector<std::vector<std::int32_t>> global_labels;
    for (std::size_t m = 0; m < micro_batches; ++m) {
        global_images.emplace_back(2 * batch);
        std::copy(data.images[m].begin(), data.images[m].end(), global_images.back().begin());
        std::copy(data.images[m].begin(), data.images[m].end(),
                  global_images.back().begin() + batch * net::input::size);
        global_labels.push_back(data.labels[m]);
        global_labels.back().insert(global_labels.back().end(), data.labels[m].begin(), data.labels[m].end());
    }
    petra::mpi_pipeline<net, one_stage, petra::sgd<float>> petra_replicas(
        MPI_COMM_WORLD, 1, petra::sgd_options{}, learning_rate, {.batch = batch, .replicas = 2});
    data_parallel_backprop backprop(2);
    auto parameters = net::make_parameters<float>(1);
    petra::sequential_pipeline<net, one_stage, petra::sgd<float>> one_rank(parameters, petra::sgd_options{},
                                                                           learning_rate, {.batch = batch});
    const auto rate = [&](double seconds, std::size_t examples_per_micro_batch) {
        return double(micro_batches * examples_per_micro_batch) / seconds;
    };
    std::vector<double> on_replicas, on_backprop, on_one;
    for (int round = -1; round < rounds; ++round) {
        sleeping_barrier();
        auto start = std::chrono::steady_clock::now();
        for (std::size_t m = 0; m < micro_batches; ++m) petra_replicas.feed(global_images[m], global_labels[m]);
        petra_replicas.drain();
        const double replica_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        sleeping_barrier();
        start = std::chrono::steady_clock::now();
        for (std::size_t m = 0; m < micro_batches; ++m) backprop.train(data.images[m], data.labels[m]);
        const double backprop_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        sleeping_barrier();
        if (world_rank() == 0) {
            const double seconds = epoch_seconds(one_rank, data);
            if (round >= 0) on_one.push_back(rate(seconds, batch));
        }
        if (round >= 0) {
            on_replicas.push_back(rate(replica_seconds, 2 * batch));
            on_backprop.push_back(rate(backprop_seconds, 2 * batch));
        }
    }
    sleeping_barrier();
    if (world_rank() != 0) return 0;
    std::printf("| D = 2, J = 1, one epoch of %zu micro-batches of 2 x %zu | ", micro_batches, batch);
    for (int round = 0; round < rounds; ++round) std::printf("round %d | ", round + 1);
    std::printf("median |\n|---|");
    for (int round = 0; round <= rounds; ++round) std::printf("---:|");
    const auto row = [&](const char* name, const std::vector<double>& rates) {
        std::printf("\n| %s (examples/s) | ", name);
        for (double value : rates) std::printf("%.0f | ", value);
        std::printf("%.0f |", median(rates));
    };
    row("PETRA, 2 replicas on 2 ranks", on_replicas);
    row("data-parallel backprop, 2 ranks", on_backprop);
    row("PETRA, J = 1 on 1 rank (micro-batches of 64)", on_one);
    std::printf("\n\nreplicas / data-parallel backprop (medians): %.3f\nreplicas / one rank (medians): %.3f\n",
                median(on_replicas) / median(on_backprop), median(on_replicas) / median(on_one));
    return 0;
}

template <std::size_t J>
int memory(bool on_threads)
{
    constexpr auto cuts = petra::reference_cuts<J>();
    const std::size_t before = peak_rss_bytes();
    const epoch_data data(world_rank() == 0 ? 12 : 0);
    std::size_t held = 0, parameters_held = 0;
    if (on_threads) {
        auto parameters = net::make_parameters<float>(1);
        petra::thread_pipeline<net, cuts, petra::sgd<float>> pipeline(parameters, petra::sgd_options{}, learning_rate,
                                                                      {.batch = batch});
        epoch_seconds(pipeline, data);
        held = pipeline.memory_bytes() + (parameters.values().size() + parameters.state().size()) * sizeof(float);
        parameters_held = (parameters.values().size() + parameters.state().size()) * sizeof(float);
    } else {
        petra::mpi_pipeline<net, cuts, petra::sgd<float>> pipeline(MPI_COMM_WORLD, 1, petra::sgd_options{},
                                                                   learning_rate, {.batch = batch});
        for (std::size_t m = 0; m < 12; ++m) {
            if (pipeline.feeds()) pipeline.feed(data.images[m], data.labels[m]);
            else pipeline.feed();
        }
        pipeline.drain();
        held = pipeline.memory_bytes();
        for (std::size_t j = pipeline.first_stage(); j < pipeline.end_stage(); ++j) {
            parameters_held += (net::parameter_offsets[cuts[j + 1]] - net::parameter_offsets[cuts[j]] +
                                net::state_offsets[cuts[j + 1]] - net::state_offsets[cuts[j]]) *
                               sizeof(float);
        }
    }
    int ranks = 1, rank = world_rank();
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    const unsigned long long mine[4] = {peak_rss_bytes(), before, held, parameters_held};
    std::vector<unsigned long long> all(4 * std::size_t(ranks));
    MPI_Gather(mine, 4, MPI_UNSIGNED_LONG_LONG, all.data(), 4, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
    if (rank != 0) return 0;
    const double mib = 1024.0 * 1024.0;
    for (int r = 0; r < ranks; ++r) {
        const unsigned long long* row = all.data() + 4 * r;
        std::printf("| J = %zu on %s | %d | %.1f | %.1f | %.1f | %.2f |\n", J,
                    on_threads ? "threads, 1 process" : (std::to_string(ranks) + " ranks").c_str(), r,
                    double(row[0]) / mib, double(row[0] - row[1]) / mib, double(row[2]) / mib, double(row[3]) / mib);
    }
    return 0;
}

} // namespace

int main(int argc, char** argv)
{
    petra::mpi_session mpi(argc, argv);
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "throughput") {
        const int rounds = argc > 2 ? std::atoi(argv[2]) : 3;
        const std::size_t micro_batches = argc > 3 ? std::size_t(std::atoi(argv[3])) : 48;
        const int stages = argc > 4 ? std::atoi(argv[4]) : 2;
        if (stages == 2) return throughput<2>(rounds, micro_batches);
        if (stages == 4) return throughput<4>(rounds, micro_batches);
    }
    if (mode == "link") return link(argc > 2 ? std::atoi(argv[2]) : 20);
    if (mode == "replicas") {
        return replicas(argc > 2 ? std::atoi(argv[2]) : 5, argc > 3 ? std::size_t(std::atoi(argv[3])) : 24);
    }
    const std::size_t stages = argc > 2 ? std::size_t(std::atoi(argv[2])) : 4;
    if ((mode == "memory" || mode == "memory-threads") && (stages == 2 || stages == 4)) {
        const bool threads = mode == "memory-threads";
        return stages == 2 ? memory<2>(threads) : memory<4>(threads);
    }
    if (mpi.rank() == 0) {
        std::fprintf(stderr, "usage: bench_mpi throughput [ROUNDS] [MICRO_BATCHES] [2|4] | replicas [ROUNDS] "
                             "[MICRO_BATCHES] | link [REPETITIONS] | memory [2|4] | memory-threads [2|4]\n");
    }
    return 2;
}
