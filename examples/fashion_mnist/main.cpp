// The main job: train the reference network on Fashion-MNIST with PETRA,
// exact backprop or reversible backprop, and report test accuracy, time,
// throughput and memory. Run with --help for the options.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>

#include <CLI/CLI.hpp>

#include "command_line.hpp"
#include "job.hpp"
#ifdef PETRA_JOB_WITH_MPI
#include <mpi.h>

#include <petra/mpi/session.hpp>
#endif

namespace {

// The signal that asked the job to stop, 0 if none; it may arrive on any
// thread, hence a lock-free atomic. A second signal of either kind ends the
// process at once (the handler resets itself).
std::atomic<int> stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);

extern "C" void request_stop(int signal) { stop_signal.store(signal); }

void install_stop_handlers()
{
    struct sigaction action = {};
    action.sa_handler = request_stop;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESETHAND | SA_RESTART; // writes in progress are not cut short
    sigaction(SIGINT, &action, nullptr);
    sigaction(SIGTERM, &action, nullptr);
}

int stopped(const fashion::job_summary& summary, const std::string& checkpoint_path)
{
    const int signal = stop_signal.load() == SIGTERM ? SIGTERM : SIGINT;
    std::fprintf(stderr,
                 "\nfashion_mnist: stopped by %s at epoch %zu, micro-batch %zu (step %zu); checkpoint saved to %s "
                 "(%.1f MiB in %.2f s). Resume with the same options and --resume.\n",
                 signal == SIGTERM ? "SIGTERM" : "SIGINT", summary.position_epoch + 1, summary.position_batch,
                 summary.steps, checkpoint_path.c_str(), double(summary.checkpoint_bytes) / (1 << 20),
                 summary.checkpoint_seconds);
    return 128 + signal;
}

int finished(const fashion::job_summary& summary)
{
    const fashion::training_recipe& recipe = summary.recipe;
    const std::string stages =
        recipe.method == fashion::method::petra ? " (" + std::to_string(recipe.stages) + " stages)" : "";
    std::fprintf(stderr,
                 "%s%s: test accuracy %.2f%% after %zu epochs (%zu steps), %.1f s of training, %.0f examples/s, "
                 "peak memory %.0f MiB\n",
                 std::string(fashion::name_of(recipe.method)).c_str(), stages.c_str(), 100.0 * summary.test_accuracy,
                 summary.epochs_run, summary.steps, summary.train_seconds, summary.examples_per_second,
                 double(summary.peak_rss_bytes) / (1 << 20));
    std::printf("%s\n", fashion::summary_line(summary).c_str());
    return fashion::exit_status::done;
}

int refuse(const char* why, int status)
{
    std::fprintf(stderr, "fashion_mnist: %s\n", why);
    return status;
}

// The ranks mpirun (or another launcher) started, read from its environment
// before MPI is initialised: 1 when launched alone.
int launched_ranks()
{
    for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"}) {
        if (const char* value = std::getenv(name)) return std::atoi(value);
    }
    return 1;
}

#ifdef PETRA_JOB_WITH_MPI
// --driver mpi: rank 0 reads the data, reports and writes the files; the
// others train quietly, and with --replicas each replica's first rank
// reads the data too (it feeds its shard). A failure after the ranks have
// started talking ends them all (MPI_Abort): the others would wait for
// this rank forever.
struct mpi_job {
    petra::mpi_session session;

    mpi_job(int& argc, char**& argv, fashion::job_options& options) : session(argc, argv)
    {
        if (session.rank() != 0) {
            options.quiet = true;
            options.metrics_path.clear();
            options.summary_path.clear();
            const int ranks_per_replica = std::max(1, session.size() / int(std::max<std::size_t>(options.replicas, 1)));
            options.loads_data = session.rank() % ranks_per_replica == 0;
        }
        options.share_data_sizes = [](std::size_t& train_size, std::size_t& test_size) {
            unsigned long long sizes[2] = {train_size, test_size};
            MPI_Bcast(sizes, 2, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
            train_size = std::size_t(sizes[0]);
            test_size = std::size_t(sizes[1]);
        };
    }

    // A stop request (a signal) reaches the ranks at different moments;
    // they agree on it one micro-batch later: each call completes the
    // previous call's reduction of every rank's request, and starts the next
    // one, so that every rank stops before the same micro-batch.
    std::function<bool()> agreed_stop(std::function<bool()> requested)
    {
        return [this, requested = std::move(requested)] {
            int any = 0;
            if (pending_ != MPI_REQUEST_NULL) {
                MPI_Wait(&pending_, MPI_STATUS_IGNORE);
                any = reduced_;
            }
            local_ = requested() ? 1 : 0;
            MPI_Iallreduce(&local_, &reduced_, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD, &pending_);
            return any != 0;
        };
    }
    ~mpi_job()
    {
        if (pending_ != MPI_REQUEST_NULL) MPI_Wait(&pending_, MPI_STATUS_IGNORE);
    }

    [[noreturn]] void abort(const std::string& why, int status) const
    {
        std::fprintf(stderr, "fashion_mnist: rank %d of %d: %s\n", session.rank(), session.size(), why.c_str());
        std::fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, status);
        std::exit(status);
    }

private:
    MPI_Request pending_ = MPI_REQUEST_NULL;
    int local_ = 0;
    int reduced_ = 0;
};
#endif

} // namespace

int main(int argc, char** argv)
{
    namespace exit_status = fashion::exit_status;
    fashion::job_options options;
    CLI::App command_line{"", "fashion_mnist"};
    fashion::declare_options(command_line, options);
    try {
        command_line.parse(argc, argv);
        fashion::checked_recipe(options);
    } catch (const CLI::CallForHelp&) {
        std::fputs(command_line.help().c_str(), stdout);
        return exit_status::done;
    } catch (const CLI::ParseError& error) {
        return refuse((std::string(error.what()) + " (see --help)").c_str(), exit_status::usage);
    } catch (const std::invalid_argument& error) {
        return refuse(error.what(), exit_status::usage);
    }
    const fashion::training_recipe recipe = fashion::checked_recipe(options);
    if (recipe.driver != fashion::driver::mpi && launched_ranks() > 1) {
        return refuse(("this job was launched on " + std::to_string(launched_ranks()) + " MPI ranks, but --driver " +
                       options.driver + " runs in one process: pass --driver mpi, or launch it alone.")
                          .c_str(),
                      exit_status::usage);
    }
#ifdef PETRA_JOB_WITH_MPI
    std::optional<mpi_job> mpi;
    if (recipe.driver == fashion::driver::mpi) {
        mpi.emplace(argc, argv, options);
        // Before the data is read: every rank refuses alike.
        const std::size_t ranks = std::size_t(mpi->session.size());
        if (ranks % recipe.replicas != 0) {
            return refuse(
                ("rank " + std::to_string(mpi->session.rank()) + ": " + std::to_string(ranks) +
                 " MPI ranks cannot hold " + std::to_string(recipe.replicas) +
                 " replicas of equal size: launch a multiple of " + std::to_string(recipe.replicas) + " ranks.")
                    .c_str(),
                exit_status::usage);
        }
        if (recipe.replicas > 1 && ranks / recipe.replicas > recipe.stages) {
            return refuse(("rank " + std::to_string(mpi->session.rank()) + ": " + std::to_string(ranks) +
                           " MPI ranks make " + std::to_string(recipe.replicas) + " replicas of " +
                           std::to_string(ranks / recipe.replicas) + " ranks for " + std::to_string(recipe.stages) +
                           " stages; every rank hosts at least one stage: launch at most " +
                           std::to_string(recipe.replicas * recipe.stages) + " ranks, or pass more --stages.")
                              .c_str(),
                          exit_status::usage);
        }
        if (ranks > recipe.stages * recipe.replicas) {
            return refuse(("rank " + std::to_string(mpi->session.rank()) + ": " + std::to_string(mpi->session.size()) +
                           " MPI ranks for " + std::to_string(recipe.stages) +
                           " stages; every rank hosts at least one stage: launch at most " +
                           std::to_string(recipe.stages) + " ranks, or pass more --stages.")
                              .c_str(),
                          exit_status::usage);
        }
    }
    const bool reports = !mpi || mpi->session.rank() == 0;
#else
    const bool reports = true;
#endif
    // Without a checkpoint there is nothing to save: a signal ends the job
    // as it ends any program.
    if (!options.checkpoint_path.empty()) {
        install_stop_handlers();
        options.stop_requested = [] { return stop_signal.load() != 0; };
#ifdef PETRA_JOB_WITH_MPI
        if (mpi) options.stop_requested = mpi->agreed_stop(options.stop_requested);
#endif
    }
    const auto failed = [&](const char* why, int status) {
#ifdef PETRA_JOB_WITH_MPI
        if (mpi && mpi->session.size() > 1) mpi->abort(why, status);
#endif
        return refuse(why, status);
    };
    try {
        const fashion::job_summary summary = fashion::run_job(options);
        if (!reports) return summary.interrupted ? 128 + (stop_signal.load() == SIGTERM ? SIGTERM : SIGINT) : 0;
        return summary.interrupted ? stopped(summary, options.checkpoint_path) : finished(summary);
    } catch (const std::invalid_argument& error) {
        // Options, a checkpoint of other options, more ranks than stages:
        // every rank finds these alike, so each ends by itself.
        return refuse(error.what(), exit_status::usage);
    } catch (const petra::data_error& error) {
        return failed(error.what(), exit_status::bad_data);
    } catch (const std::exception& error) {
        return failed(error.what(), exit_status::failure);
    }
}
