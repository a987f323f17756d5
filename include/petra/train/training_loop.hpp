// The training loop (floor 8): a method (training_method.hpp) trained on a
// data source (data_source.hpp) for the epochs of a plan (training_plan.hpp),
// with checkpoints, resume and stop requests built in. The loop a program
// would otherwise write again, and get resume wrong in again:
//
//   petra::training_loop loop(method, data, plan, {.checkpoint_path = "run.checkpoint",
//                                                  .checkpoint_every = 100, .stop_flag = &stop});
//   const bool finished = loop.run();   // resumes from run.checkpoint when it exists
//
// - Checkpoints: every checkpoint_every micro-batches and/or every
//   checkpoint_every_seconds, at a stop and at the end; each written whole
//   or not at all (the previous one stays until the new one is complete).
//   A file holds the caller's records (callbacks.save_records: its own
//   settings, read back first so that the caller names a mismatch), the
//   loop's (epochs, micro-batches per epoch, budget: a run of another plan
//   is refused in one sentence), the position and finished epochs, the data
//   source's state (if it has transfer_state), and the method's.
// - Resume: run() first calls restore(), which loads the checkpoint when
//   the file exists; the run then goes on as if never interrupted (the same
//   parameters, bit for bit, as tests/train shows for every method).
// - Stop: before each micro-batch the loop asks stop_requested (if set) and
//   reads stop_flag (if set); either says stop: the checkpoint is saved and
//   run() returns false. A signal handler may set the flag: the micro-batch
//   in progress (a tick of PETRA) finishes first.
// - Between epochs: callbacks.evaluate scores the network (after
//   end_epoch(): no stage runs), and callbacks.epoch_finished gets the
//   epoch's record. callbacks.trained gets the position and the epoch's
//   statistics after every micro-batch (a progress bar).
// - A method whose checkpoints hold only the state an epoch's end leaves
//   (method.checkpoints_within_epoch() false: PETRA's replicas on MPI
//   ranks, whose in-flight states differ) saves a checkpoint falling due
//   within an epoch at the epoch's end instead, and at a stop within an
//   epoch saves none: the run resumes from the last epoch's end.
// - Nothing is allocated per micro-batch: the micro-batch buffers are the
//   loop's, allocated once.
//
// Errors: checkpoint files raise checkpoint_error (damaged, another network,
// another method's layout); a checkpoint of another plan, or data of another
// micro-batch size than the method's, invalid_argument; training's own
// errors pass through.
#pragma once

#if !(defined(__cpp_exceptions) || defined(__EXCEPTIONS))
#error "petra: train/training_loop.hpp needs exceptions: checkpoint files report with them only (see error.hpp)."
#endif

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <petra/batch_view.hpp>
#include <petra/error.hpp>
#include <petra/owned_batch.hpp>
#include <petra/state_archive.hpp>
#include <petra/train/checkpoint.hpp>
#include <petra/train/data_source.hpp>
#include <petra/train/training_method.hpp>
#include <petra/train/training_plan.hpp>

namespace petra {

struct training_loop_options {
    std::string checkpoint_path = {};             // empty: no checkpoints (and no resume)
    std::size_t checkpoint_every = 0;             // micro-batches; 0: not on a count
    double checkpoint_every_seconds = 0;          // 0: not on the clock
    const std::atomic<bool>* stop_flag = nullptr; // set by the caller: stop, with the checkpoint saved
    std::function<bool()> stop_requested = {};    // asked exactly once before each micro-batch
};

// The network scored between epochs.
struct test_score {
    double loss = 0;     // mean loss over the examples
    double accuracy = 0; // the fraction classified right
};

// One finished epoch.
struct epoch_record {
    std::size_t epoch = 0; // from 1
    std::size_t steps = 0; // micro-batches trained in the run at its end
    double train_loss = 0, train_accuracy = 0, test_loss = 0, test_accuracy = 0;
    double seconds = 0;       // training time of the run at its end
    double learning_rate = 0; // of the last optimizer step
};

struct training_callbacks {
    std::function<void(const training_position&, const epoch_statistics&)> trained = {}; // after each micro-batch
    std::function<test_score()> evaluate = {}; // between epochs; unset: no test figures
    std::function<void(const epoch_record&)> epoch_finished = {};
    std::function<void(std::size_t steps)> checkpoint_saved = {}; // after each save, with the micro-batches trained
    // The caller's own records, first in every checkpoint; loading reads
    // them back and may refuse (raise) a checkpoint of other settings.
    std::function<void(checkpoint_writer&)> save_records = {};
    std::function<void(checkpoint_reader&)> load_records = {};
};

// A method whose checkpoint is one file the loop writes (its
// transfer_state), or files of its own (save_checkpoint, load_checkpoint).
template <class M>
concept one_file_checkpoint = requires(M& method, checkpoint_writer& out, checkpoint_reader& in)
{
    method.transfer_state(out);
    method.transfer_state(in);
};
template <class M>
concept own_checkpoint_files = requires(M& method, const std::string& path)
{
    requires std::same_as<decltype(method.save_checkpoint(path, [](auto&) {})), std::uint64_t>;
    method.load_checkpoint(path, [](auto&) {});
};

template <training_method Method, data_source<typename Method::network::input> Source>
    requires one_file_checkpoint<Method> || own_checkpoint_files<Method>
class training_loop {
    using input = typename Method::network::input;

public:
    // The method, the source and the plan are the caller's and must outlive
    // the loop. Raises invalid_argument when the source's micro-batches per
    // epoch differ from the plan's.
    training_loop(Method& method, Source& source, const training_plan& plan, training_loop_options options = {},
                  training_callbacks callbacks = {})
        : method_(method), source_(source), plan_(plan), options_(std::move(options)), callbacks_(std::move(callbacks)),
          images_(source.batch_size()), labels_(source.batch_size())
    {
        if (std::size_t(source.batches_per_epoch()) != plan.batches_per_epoch()) {
            raise_error(error_kind::invalid_argument,
                        "training_loop: the data source has " + std::to_string(source.batches_per_epoch()) +
                            " micro-batches per epoch, the plan " + std::to_string(plan.batches_per_epoch()) + ".");
        }
        epochs_.reserve(plan.epochs());
    }
    training_loop(const training_loop&) = delete;
    training_loop& operator=(const training_loop&) = delete;

    // Loads the checkpoint if its file exists (once: later calls return
    // what the first did). Returns whether it did.
    bool restore()
    {
        if (restore_tried_) return restored_;
        restore_tried_ = true;
        if (options_.checkpoint_path.empty() || !std::filesystem::exists(options_.checkpoint_path)) return false;
        const auto records = [&](auto& archive) { transfer_run(archive); };
        if constexpr (own_checkpoint_files<Method>) {
            method_.load_checkpoint(options_.checkpoint_path, records);
        } else {
            checkpoint_reader in(options_.checkpoint_path, Method::network::signature);
            records(in);
            method_.transfer_state(in);
            in.finish();
        }
        restored_ = true;
        return true;
    }

    // Trains from the position (restored first, if not done) to the plan's
    // end: returns true, the checkpoint saved; or until a stop is
    // requested: returns false, the checkpoint saved.
    bool run()
    {
        restore();
        clock_.restart();
        while (plan_.epoch_remains(position_.epoch, position_.batch, position_.steps)) {
            if (!train_epoch()) return false;
            finish_epoch(method_.end_epoch());
            position_.batch = 0;
            ++position_.epoch;
            if (std::exchange(save_at_epoch_end_, false)) save_checkpoint();
        }
        save_checkpoint();
        return true;
    }

    // Saves the checkpoint now (nothing without a path), under the method's
    // pause(); the time counted includes the time run so far.
    void save_checkpoint()
    {
        if (options_.checkpoint_path.empty()) return;
        [[maybe_unused]] const auto paused = method_.pause();
        const double counted = position_.training_seconds;
        position_.training_seconds += clock_.elapsed();
        const auto start = std::chrono::steady_clock::now();
        const auto records = [&](auto& archive) { transfer_run(archive); };
        if constexpr (own_checkpoint_files<Method>) {
            last_bytes_ = method_.save_checkpoint(options_.checkpoint_path, records);
        } else {
            checkpoint_writer out(options_.checkpoint_path, Method::network::signature);
            records(out);
            method_.transfer_state(out);
            out.commit();
            last_bytes_ = std::filesystem::file_size(options_.checkpoint_path);
        }
        position_.training_seconds = counted;
        const auto end = std::chrono::steady_clock::now();
        last_seconds_ = std::chrono::duration<double>(end - start).count();
        last_save_ = end;
        if (callbacks_.checkpoint_saved) callbacks_.checkpoint_saved(position_.steps);
    }

    const training_position& position() const { return position_; }
    const std::vector<epoch_record>& epochs() const { return epochs_; }
    const training_plan& plan() const { return plan_; }
    // The last checkpoint saved: its size (all its files) and how long
    // writing it took.
    std::size_t last_checkpoint_bytes() const { return last_bytes_; }
    double last_checkpoint_seconds() const { return last_seconds_; }

private:
    // The current epoch from the position on; false if a stop was
    // requested (the checkpoint saved).
    bool train_epoch()
    {
        while (plan_.micro_batch_remains(position_.batch, position_.steps)) {
            if (stop_requested()) {
                if (can_save_now()) save_checkpoint();
                return false;
            }
            if (method_.reads_data()) source_.batch(position_.epoch, position_.batch, images_, labels_);
            method_.train(training_batch<input>{images_, labels_}, position_);
            ++position_.batch;
            ++position_.steps;
            const epoch_statistics so_far = method_.progress(); // collective on MPI ranks: always asked
            if (callbacks_.trained) callbacks_.trained(position_, so_far);
            if (checkpoint_due()) {
                if (can_save_now()) save_checkpoint();
                else save_at_epoch_end_ = true;
            }
        }
        return true;
    }

    // Whether the method's state can be saved at this position (see the
    // top of the file).
    bool can_save_now() const
    {
        if constexpr (requires { method_.checkpoints_within_epoch(); }) {
            return position_.batch == 0 || method_.checkpoints_within_epoch();
        } else {
            return true;
        }
    }

    // The function is asked every time (on MPI ranks it may be collective).
    bool stop_requested() const
    {
        const bool asked = options_.stop_requested && options_.stop_requested();
        return asked || (options_.stop_flag != nullptr && options_.stop_flag->load());
    }

    bool checkpoint_due()
    {
        if (options_.checkpoint_path.empty()) return false;
        if (options_.checkpoint_every != 0 && position_.steps % options_.checkpoint_every == 0) return true;
        if (options_.checkpoint_every_seconds <= 0) return false;
        const bool due = std::chrono::duration<double>(std::chrono::steady_clock::now() - last_save_).count() >=
                         options_.checkpoint_every_seconds;
        if constexpr (requires { method_.agree(due); }) return method_.agree(due); // the same on every rank
        else return due;
    }

    void finish_epoch(const epoch_statistics& statistics)
    {
        position_.training_seconds += clock_.elapsed();
        const test_score test = callbacks_.evaluate ? callbacks_.evaluate() : test_score{};
        const epoch_record record{.epoch = position_.epoch + 1,
                                  .steps = position_.steps,
                                  .train_loss = statistics.mean_loss(),
                                  .train_accuracy = statistics.accuracy(),
                                  .test_loss = test.loss,
                                  .test_accuracy = test.accuracy,
                                  .seconds = position_.training_seconds,
                                  .learning_rate = plan_.learning_rate_after(position_.steps)};
        epochs_.push_back(record);
        if (callbacks_.epoch_finished) callbacks_.epoch_finished(record);
        clock_.restart(); // evaluation is not training time
    }

    template <state_archive Archive>
    void transfer_run(Archive& archive)
    {
        if constexpr (Archive::loading) {
            if (callbacks_.load_records) callbacks_.load_records(archive);
        } else {
            if (callbacks_.save_records) callbacks_.save_records(archive);
        }
        transfer_plan(archive);
        transfer_position(archive);
        if constexpr (requires { source_.transfer_state(archive); }) source_.transfer_state(archive);
    }

    // Loading: a checkpoint of another plan refused, named in one sentence.
    template <state_archive Archive>
    void transfer_plan(Archive& archive)
    {
        archive.section("training loop");
        const std::array<std::pair<const char*, std::size_t>, 3> figures{
            {{"epochs", plan_.epochs()},
             {"micro-batches per epoch", plan_.batches_per_epoch()},
             {"micro-batches in all", plan_.total_micro_batches()}}};
        for (const auto& [name, figure] : figures) {
            std::size_t saved = figure;
            archive.count(saved, any_count);
            if (Archive::loading && saved != figure) {
                raise_error(error_kind::invalid_argument,
                            "checkpoint '" + options_.checkpoint_path + "' was saved by a run of " +
                                std::to_string(saved) + " " + name + ", this one has " + std::to_string(figure) +
                                ": resume with the plan and data it was saved with, or remove it to start afresh.");
            }
        }
    }

    template <state_archive Archive>
    void transfer_position(Archive& archive)
    {
        archive.section("position");
        archive.count(position_.epoch, plan_.epochs());
        archive.count(position_.batch, plan_.batches_per_epoch());
        archive.count(position_.steps, plan_.total_micro_batches());
        archive.values(std::span<double>(&position_.training_seconds, 1));
        std::size_t finished = epochs_.size();
        archive.count(finished, position_.epoch);
        epochs_.resize(finished);
        for (epoch_record& record : epochs_) {
            std::array<double, 8> fields{double(record.epoch),  double(record.steps), record.train_loss,
                                         record.train_accuracy, record.test_loss,     record.test_accuracy,
                                         record.seconds,        record.learning_rate};
            archive.values(std::span<double>(fields));
            record = {std::size_t(fields[0]),
                      std::size_t(fields[1]),
                      fields[2],
                      fields[3],
                      fields[4],
                      fields[5],
                      fields[6],
                      fields[7]};
        }
    }

    // Training time: evaluation and the time before run() are not counted.
    class training_clock {
    public:
        void restart() { start_ = clock::now(); }
        double elapsed() const { return std::chrono::duration<double>(clock::now() - start_).count(); }

    private:
        using clock = std::chrono::steady_clock;
        clock::time_point start_ = clock::now();
    };

    Method& method_;
    Source& source_;
    const training_plan& plan_;
    training_loop_options options_;
    training_callbacks callbacks_;
    owned_batch<float, input> images_;
    std::vector<std::int32_t> labels_;
    training_position position_;
    std::vector<epoch_record> epochs_;
    training_clock clock_;
    std::chrono::steady_clock::time_point last_save_ = std::chrono::steady_clock::now();
    bool restore_tried_ = false;
    bool restored_ = false;
    bool save_at_epoch_end_ = false; // a checkpoint fell due where the method cannot save
    std::size_t last_bytes_ = 0;
    double last_seconds_ = 0;
};

} // namespace petra
