// Progress of a long training run, for people watching it: on a terminal a
// bar redrawn in place (epoch, step, loss, accuracy, examples/s, time left),
// otherwise (a log file, CI) one plain line at most every `interval`
// seconds and at the end of each epoch. Also the process's peak memory.
#pragma once

#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <string>

namespace petra {

// The peak resident set size of this process so far, in bytes.
inline std::size_t peak_rss_bytes()
{
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return static_cast<std::size_t>(usage.ru_maxrss) * 1024;
}

// "1h02m", "3m05s", "12s".
inline std::string format_duration(double seconds)
{
    const auto total = static_cast<long long>(seconds < 0 ? 0 : seconds + 0.5);
    char text[32];
    if (total >= 3600) {
        std::snprintf(text, sizeof text, "%lldh%02lldm", total / 3600, (total % 3600) / 60);
    } else if (total >= 60) {
        std::snprintf(text, sizeof text, "%lldm%02llds", total / 60, total % 60);
    } else {
        std::snprintf(text, sizeof text, "%llds", total);
    }
    return text;
}

class progress_reporter {
public:
    // total_steps: of the whole run (for the time left); out: where to draw.
    progress_reporter(std::size_t total_steps, std::size_t examples_per_step, std::FILE* out = stderr,
                      double interval = 10.0)
        : total_steps_(total_steps), examples_per_step_(examples_per_step), out_(out), interval_(interval),
          terminal_(isatty(fileno(out)) != 0), start_(clock::now()), last_line_(start_)
    {}

    // After each step: the run's step count so far and the current epoch's
    // running loss and accuracy.
    void update(std::size_t epoch, std::size_t epochs, std::size_t step, double loss, double accuracy)
    {
        const auto now = clock::now();
        if (terminal_) {
            if (now - last_draw_ < std::chrono::milliseconds(200) && step != total_steps_) return;
            last_draw_ = now;
            std::fprintf(out_, "\r%s\033[K", line(epoch, epochs, step, loss, accuracy, now).c_str());
            std::fflush(out_);
        } else if (seconds(now - last_line_) >= interval_) {
            last_line_ = now;
            std::fprintf(out_, "%s\n", line(epoch, epochs, step, loss, accuracy, now).c_str());
            std::fflush(out_);
        }
    }

    // At the end of an epoch: a line that stays, with what the caller adds.
    void epoch_done(std::size_t epoch, std::size_t epochs, std::size_t step, double loss, double accuracy,
                    const std::string& extra)
    {
        const auto now = clock::now();
        last_line_ = now;
        std::fprintf(out_, "%s%s%s\n", terminal_ ? "\r\033[K" : "",
                     line(epoch, epochs, step, loss, accuracy, now).c_str(), extra.c_str());
        std::fflush(out_);
    }

    double elapsed_seconds() const { return seconds(clock::now() - start_); }

    // A run resumed from a checkpoint: its first `step` steps were done
    // before, and do not count in the rate and the time left.
    void resumed_at(std::size_t step) { first_step_ = step; }

private:
    using clock = std::chrono::steady_clock;

    static double seconds(clock::duration duration) { return std::chrono::duration<double>(duration).count(); }

    std::string line(std::size_t epoch, std::size_t epochs, std::size_t step, double loss, double accuracy,
                     clock::time_point now) const
    {
        const double elapsed = seconds(now - start_);
        const std::size_t done = step > first_step_ ? step - first_step_ : 0;
        const double rate = elapsed > 0 ? double(done * examples_per_step_) / elapsed : 0.0;
        const double left =
            done > 0 && total_steps_ > step ? elapsed / double(done) * double(total_steps_ - step) : 0.0;
        char text[256];
        std::snprintf(text, sizeof text,
                      "epoch %zu/%zu  step %zu/%zu  loss %.4f  accuracy %.2f%%  %.0f examples/s  "
                      "elapsed %s  left %s",
                      epoch, epochs, step, total_steps_, loss, 100.0 * accuracy, rate, format_duration(elapsed).c_str(),
                      format_duration(left).c_str());
        return text;
    }

    std::size_t total_steps_;
    std::size_t first_step_ = 0;
    std::size_t examples_per_step_;
    std::FILE* out_;
    double interval_;
    bool terminal_;
    clock::time_point start_;
    clock::time_point last_line_;
    clock::time_point last_draw_{};
};

} // namespace petra
