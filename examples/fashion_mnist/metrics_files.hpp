// The run's CSV files: the metrics (one row per finished epoch) and, for a
// PETRA run that measures it, the gradient fidelity (one row per stage and
// measurement). Both hold only what the run's position covers: on resume
// they are rewritten, so that nothing is lost or written twice.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <fstream>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "fidelity.hpp"
#include "options.hpp"
#include "run_state.hpp"

namespace fashion {

// "run.csv" -> "run-fidelity.csv"; any other name gets "-fidelity.csv".
inline std::string fidelity_path_of(const std::string& metrics_path)
{
    const bool csv = metrics_path.size() > 4 && metrics_path.compare(metrics_path.size() - 4, 4, ".csv") == 0;
    return (csv ? metrics_path.substr(0, metrics_path.size() - 4) : metrics_path) + "-fidelity.csv";
}

// The columns that name the run, first on every row of both files; the
// network and the rate's recipe (peak, warm-up, delay exponent) come last on
// every row (trailing_columns), so that files written before they existed
// keep their leading columns and runs that differ only in their rates can
// be told apart. The learning_rate column is the schedule's rate at the
// epoch's end, the last stage's; with p > 0 the others step at less.
inline std::string run_columns(const training_recipe& recipe)
{
    std::ostringstream text;
    text << name_of(recipe.method) << ',' << recipe.stages << ',' << recipe.accumulation << ',' << recipe.seed << ',';
    return text.str();
}
inline constexpr const char* trailing_header = "network,peak_learning_rate,warmup_epochs,delay_rate_exponent";
inline std::string trailing_columns(const training_recipe& recipe)
{
    std::ostringstream text;
    text << ',' << name_of(recipe.network) << ',' << recipe.learning_rate << ',' << recipe.warmup_epochs << ','
         << recipe.delay_rate_exponent;
    return text.str();
}

class metrics_file {
public:
    // Writes the header and the epochs already finished (those of a
    // resumed run's checkpoint). An empty path: no file, write() does
    // nothing.
    void open(const std::string& path, const training_recipe& recipe, std::span<const epoch_record> finished)
    {
        if (path.empty()) return;
        out_.open(path, std::ios::trunc);
        if (!out_) throw std::runtime_error(path + ": cannot write the metrics file.");
        run_columns_ = run_columns(recipe);
        trailing_columns_ = trailing_columns(recipe);
        out_ << "method,stages,accumulation,seed,epoch,steps,train_loss,train_accuracy,test_loss,test_accuracy,"
                "seconds,learning_rate,"
             << trailing_header << '\n';
        for (const epoch_record& record : finished) write(record);
    }

    void write(const epoch_record& record)
    {
        if (!out_.is_open()) return;
        out_ << run_columns_ << record.epoch << ',' << record.steps << ',' << record.train_loss << ','
             << record.train_accuracy << ',' << record.test_loss << ',' << record.test_accuracy << ',' << record.seconds
             << ',' << record.learning_rate << trailing_columns_ << '\n';
        out_.flush();
    }

private:
    std::ofstream out_;
    std::string run_columns_, trailing_columns_;
};

class fidelity_file {
public:
    // A fresh file: the header.
    void open(const std::string& path, const training_recipe& recipe) { start(path, recipe, {}); }

    // A resumed run's file: the header, then the old file's rows of the
    // steps up to last_step (those the checkpoint covers).
    void reopen(const std::string& path, const training_recipe& recipe, std::size_t last_step)
    {
        start(path, recipe, rows_through(path, last_step));
    }

    // The measurements of one step (counted over the run) of one epoch
    // (counted from 1).
    void write(std::size_t epoch, std::size_t step, std::span<const stage_fidelity> results)
    {
        for (const stage_fidelity& result : results) {
            out_ << run_columns_ << epoch << ',' << step << ',' << result.stage << ',' << result.micro_batch << ','
                 << result.cosine << ',' << result.norm_ratio << trailing_columns_ << '\n';
        }
        out_.flush();
    }

private:
    void start(const std::string& path, const training_recipe& recipe, const std::vector<std::string>& kept)
    {
        out_.open(path, std::ios::trunc);
        if (!out_) throw std::runtime_error(path + ": cannot write the gradient-fidelity file.");
        run_columns_ = run_columns(recipe);
        trailing_columns_ = trailing_columns(recipe);
        out_ << "method,stages,accumulation,seed,epoch,step,stage,micro_batch,cosine,norm_ratio," << trailing_header
             << '\n';
        for (const std::string& line : kept) out_ << line << '\n';
        out_.flush();
    }

    static std::vector<std::string> rows_through(const std::string& path, std::size_t last_step)
    {
        std::vector<std::string> kept;
        std::ifstream old(path);
        std::string line;
        std::getline(old, line); // the header
        while (std::getline(old, line)) {
            std::stringstream fields(line);
            std::string step; // the sixth field
            for (int i = 0; i < 6; ++i) std::getline(fields, step, ',');
            if (std::strtoull(step.c_str(), nullptr, 10) <= last_step) kept.push_back(line);
        }
        return kept;
    }

    std::ofstream out_;
    std::string run_columns_, trailing_columns_;
};

} // namespace fashion
