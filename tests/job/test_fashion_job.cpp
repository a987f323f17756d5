// The Fashion-MNIST job end to end on generated data: IDX files written by
// the test (28 x 28 images whose class shows as a bright square at its own
// place), a few epochs with each method; the loss must fall and the test
// accuracy beat chance; the metrics file and the summary must say so. A run
// stopped and resumed from its checkpoint ends as one that was not.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <zlib.h>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <petra/interchange/npz.hpp>

#include "digest.hpp"
#include "job.hpp"

namespace {

void write_idx_gzip(const std::string& path, std::vector<std::uint32_t> dims, const std::vector<unsigned char>& values)
{
    std::vector<unsigned char> bytes{0, 0, 0x08, static_cast<unsigned char>(dims.size())};
    for (std::uint32_t d : dims) {
        for (int shift : {24, 16, 8, 0}) bytes.push_back(static_cast<unsigned char>(d >> shift));
    }
    bytes.insert(bytes.end(), values.begin(), values.end());
    gzFile file = gzopen(path.c_str(), "wb");
    REQUIRE(file != nullptr);
    REQUIRE(gzwrite(file, bytes.data(), unsigned(bytes.size())) == int(bytes.size()));
    gzclose(file);
}

// count images of 28 x 28: noise, plus a 6 x 6 square at one of ten places
// (the class).
void write_split(const std::string& dir, const std::string& prefix, std::size_t count, std::uint64_t seed)
{
    std::mt19937_64 generator(seed);
    std::vector<unsigned char> images(count * 784), labels(count);
    for (std::size_t n = 0; n < count; ++n) {
        const int c = petra::uniform_int(generator, 0, 9);
        labels[n] = static_cast<unsigned char>(c);
        for (std::size_t p = 0; p < 784; ++p)
            images[n * 784 + p] = static_cast<unsigned char>(petra::uniform_int(generator, 0, 60));
        const std::size_t top = 2 + 12 * std::size_t(c / 5), left = 2 + 5 * std::size_t(c % 5);
        for (std::size_t y = top; y < top + 6; ++y)
            for (std::size_t x = left; x < left + 6 && x < 28; ++x) images[n * 784 + y * 28 + x] = 230;
    }
    write_idx_gzip(dir + "/" + prefix + "-images-idx3-ubyte.gz", {std::uint32_t(count), 28, 28}, images);
    write_idx_gzip(dir + "/" + prefix + "-labels-idx1-ubyte.gz", {std::uint32_t(count)}, labels);
}

struct generated_data {
    std::filesystem::path dir =
        std::filesystem::temp_directory_path() / ("petra_job_test_" + std::to_string(std::random_device{}()));
    generated_data()
    {
        std::filesystem::create_directories(dir);
        write_split(dir.string(), "train", 320, 1);
        write_split(dir.string(), "t10k", 160, 2);
    }
    ~generated_data() { std::filesystem::remove_all(dir); }
};

fashion::job_options quick(const generated_data& data, const std::string& method, std::size_t stages)
{
    fashion::job_options options;
    options.method = method;
    options.stages = stages;
    options.epochs = 4;
    options.batch = 16;
    options.learning_rate = 0.05;
    options.warmup_epochs = 0.25;
    options.schedule = "constant";
    options.data_dir = data.dir.string();
    options.quiet = true;
    return options;
}

// The fields of one CSV row (no quoting in the job's files).
std::vector<std::string> csv_fields(const std::string& line)
{
    std::vector<std::string> fields;
    std::stringstream split(line);
    for (std::string field; std::getline(split, field, ',');) fields.push_back(field);
    return fields;
}

// The run of options on threads, then on the simulator.
std::pair<fashion::job_summary, fashion::job_summary> on_threads_and_simulator(fashion::job_options options)
{
    options.driver = "threads";
    fashion::job_summary threads = fashion::run_job(options);
    options.driver = "simulator";
    return {std::move(threads), fashion::run_job(options)};
}

} // namespace

TEST_CASE("fashion_mnist job: the loss falls and the test accuracy beats chance, with every method on both networks")
{
    const generated_data data;
    for (const std::string network : {"reference", "reversible"})
        for (const auto& run :
             {std::pair<std::string, std::size_t>{"backprop", 1}, {"reversible-backprop", 1}, {"petra", 2}}) {
            const std::string& method = run.first;
            const std::size_t stages = run.second;
            CAPTURE(network);
            CAPTURE(method);
            auto options = quick(data, method, stages);
            options.network = network;
            options.metrics_path = (data.dir / (network + "-" + method + ".csv")).string();
            options.summary_path = (data.dir / (network + "-" + method + ".json")).string();
            const fashion::job_summary summary = fashion::run_job(options);
            REQUIRE(summary.epochs.size() == 4);
            INFO("train loss " << summary.epochs.front().train_loss << " -> " << summary.epochs.back().train_loss
                               << ", test accuracy " << summary.test_accuracy);
            CHECK(summary.epochs.back().train_loss < 0.7 * summary.epochs.front().train_loss);
            CHECK(summary.test_accuracy > 0.3);
            CHECK(summary.steps == 4 * (320 / 16));
            // The files say the same.
            std::ifstream csv(options.metrics_path);
            std::string header, line;
            std::getline(csv, header);
            CHECK(header.ends_with(",learning_rate,network,peak_learning_rate,warmup_epochs,delay_rate_exponent"));
            std::size_t rows = 0;
            while (std::getline(csv, line)) {
                ++rows;
                const std::vector<std::string> fields = csv_fields(line);
                REQUIRE(fields.size() == 16);
                CHECK(fields[12] == network);
                CHECK(std::stod(fields[13]) == doctest::Approx(options.learning_rate));
                CHECK(std::stod(fields[14]) == doctest::Approx(options.warmup_epochs));
                CHECK(fields[15] == "0");
            }
            CHECK(rows == 4);
            std::ifstream json(options.summary_path);
            const nlohmann::json written = nlohmann::json::parse(json);
            CHECK(written.at("network") == network);
            // PETRA's J = 2 cut of the network trained; one stage otherwise.
            const auto& two = network == "reference" ? fashion::cuts_of<fashion::reference_net, 2>
                                                     : fashion::cuts_of<fashion::reversible_net, 2>;
            CHECK(written.at("cuts") == (method == "petra" ? std::vector<std::size_t>(two.begin(), two.end())
                                                           : std::vector<std::size_t>{0, 10}));
            CHECK(written.at("method") == method);
            CHECK(written.at("steps") == summary.steps);
            CHECK(written.at("test_accuracy").get<double>() == doctest::Approx(summary.test_accuracy).epsilon(1e-3));
            CHECK(written.at("parameter_digest") == summary.parameter_digest);
        }
}

TEST_CASE("fashion_mnist job: --max-steps caps the run, and bad options or data are refused")
{
    const generated_data data;
    auto options = quick(data, "petra", 3);
    options.max_steps = 25;
    const auto summary = fashion::run_job(options);
    CHECK(summary.steps == 25);
    CHECK(summary.epochs_run == 2);

    options.method = "sgd";
    CHECK_THROWS_WITH_AS(fashion::run_job(options), doctest::Contains("--method must be petra"), std::invalid_argument);
    options = quick(data, "petra", 3);
    options.network = "resnet";
    CHECK_THROWS_WITH_AS(fashion::run_job(options),
                         doctest::Contains("--network must be reference or reversible, not 'resnet'"),
                         std::invalid_argument);
    // At most one stage per block: the refusal names the block count.
    options = quick(data, "petra", fashion::reference_net::block_count + 1);
    CHECK(fashion::max_stages == fashion::reference_net::block_count);
    CHECK(fashion::max_stages == fashion::reversible_net::block_count);
    const std::string stage_range =
        "--stages must be 1 to " + std::to_string(fashion::reference_net::block_count) + ", the network's block count";
    CHECK_THROWS_WITH_AS(fashion::run_job(options), doctest::Contains(stage_range.c_str()), std::invalid_argument);
    options.stages = 0;
    CHECK_THROWS_WITH_AS(fashion::run_job(options), doctest::Contains(stage_range.c_str()), std::invalid_argument);
    options = quick(data, "petra", 3);
    for (const double bad : {-1.0, std::nan("")}) {
        options.delay_rate_exponent = bad;
        CHECK_THROWS_WITH_AS(fashion::run_job(options),
                             doctest::Contains("--delay-rate-exponent must be a number, 0 or more"),
                             std::invalid_argument);
    }
    options = quick(data, "backprop", 1);
    options.delay_rate_exponent = 0.5;
    CHECK_THROWS_WITH_AS(fashion::run_job(options), doctest::Contains("--delay-rate-exponent scales PETRA's stages"),
                         std::invalid_argument);
    options = quick(data, "backprop", 1);
    options.data_dir = (data.dir / "missing").string();
    CHECK_THROWS_AS(fashion::run_job(options), petra::data_error);
}

TEST_CASE("fashion_mnist job: --save-weights writes the run's weights, --init-weights starts from them, --export-onnx")
{
    const generated_data data;
    const std::string weights = (data.dir / "weights.npz").string(), again = (data.dir / "again.npz").string(),
                      graph = (data.dir / "model.onnx").string();
    // No structured binding: clang++ 14 cannot capture one in INFO's lambda.
    for (const auto& run : {std::pair<std::string, std::size_t>{"petra", 3}, {"backprop", 1}}) {
        const std::string method = run.first;
        const std::size_t stages = run.second;
        INFO(method);
        auto options = quick(data, method, stages);
        options.max_steps = 10;
        options.save_weights_path = weights;
        options.onnx_path = graph;
        const auto trained = fashion::run_job(options);
        // The file holds the run's final parameters and running statistics.
        auto loaded = fashion::reference_net::make_parameters<float>(99);
        petra::load_npz(weights, loaded);
        CHECK(fashion::parameter_digest(loaded) == trained.parameter_digest);
        CHECK(std::filesystem::file_size(graph) > 4 * fashion::reference_net::parameter_count);

        // Started from them at a rate far too small to move a weight: the
        // weights end as they began (the running statistics move, as every
        // training pass moves them), not as the seed's would.
        options = quick(data, method, stages);
        options.max_steps = 3;
        options.seed = 7;
        options.init_weights_path = weights;
        options.save_weights_path = again;
        options.learning_rate = 1e-30;
        options.momentum = 0;
        options.weight_decay = 0;
        fashion::run_job(options);
        auto after = fashion::reference_net::make_parameters<float>(98);
        petra::load_npz(again, after);
        std::size_t moved = 0;
        for (std::size_t i = 0; i < fashion::reference_net::parameter_count; ++i) {
            const float before = loaded.values()[i];
            moved += std::abs(after.values()[i] - before) > 1e-6f * std::abs(before) + 1e-20f;
        }
        CHECK(moved == 0);
        CHECK_FALSE(std::equal(after.state().begin(), after.state().end(), loaded.state().begin()));
    }

    auto options = quick(data, "petra", 2);
    options.init_weights_path = (data.dir / "absent.npz").string();
    CHECK_THROWS_WITH_AS(fashion::run_job(options), doctest::Contains("absent.npz' cannot be opened"),
                         std::runtime_error);
    options.checkpoint_path = (data.dir / "run.checkpoint").string();
    options.resume = true;
    CHECK_THROWS_WITH_AS(fashion::run_job(options), doctest::Contains("--init-weights starts a run from weights"),
                         std::invalid_argument);
    options = quick(data, "petra", 2);
    options.driver = "mpi";
    options.save_weights_path = weights;
    CHECK_THROWS_WITH_AS(fashion::run_job(options), doctest::Contains("need the whole network in one process"),
                         std::invalid_argument);
}

TEST_CASE("fashion_mnist job: a delay rate exponent changes the numbers, the same on threads and the simulator")
{
    // J = 4, one epoch of 20 micro-batches: with p = 0.5 the stages before
    // the last step more slowly; both drivers agree, the summary says p.
    const generated_data data;
    auto options = quick(data, "petra", 4);
    options.epochs = 1;
    const fashion::job_summary plain = fashion::run_job(options);
    options.delay_rate_exponent = 0.5;
    options.summary_path = (data.dir / "delay-rate.json").string();
    options.metrics_path = (data.dir / "delay-rate.csv").string();
    const auto [threads, simulator] = on_threads_and_simulator(options);
    CHECK(simulator.parameter_digest == threads.parameter_digest);
    CHECK(simulator.test_accuracy == threads.test_accuracy);
    CHECK(threads.parameter_digest != plain.parameter_digest);
    std::ifstream json(options.summary_path);
    CHECK(nlohmann::json::parse(json).at("delay_rate_exponent") == 0.5);
    std::ifstream csv(options.metrics_path);
    std::string header, row;
    std::getline(csv, header);
    REQUIRE(std::getline(csv, row));
    CHECK(csv_fields(row).back() == "0.5");
}

TEST_CASE("fashion_mnist job: --precision bf16 changes the numbers, the same on threads and the simulator")
{
    const generated_data data;
    auto options = quick(data, "petra", 3);
    options.precision = "fp16";
    CHECK_THROWS_WITH_AS(fashion::run_job(options), doctest::Contains("--precision must be fp32 or bf16, not 'fp16'"),
                         std::invalid_argument);
    options.precision = "bf16";
    if (!petra::kernels::bf16_support().amx && !petra::kernels::bf16_support().avx512_bf16) {
        CHECK_THROWS_WITH_AS(fashion::run_job(options),
                             doctest::Contains("--precision bf16: petra: precision bf16 needs"), std::invalid_argument);
        return;
    }
    options.precision = "fp32";
    const fashion::job_summary plain = fashion::run_job(options);
    options.precision = "bf16";
    options.summary_path = (data.dir / "bf16.json").string();
    const auto [threads, simulator] = on_threads_and_simulator(options);
    CHECK(simulator.parameter_digest == threads.parameter_digest);
    CHECK(simulator.test_accuracy == threads.test_accuracy);
    CHECK(threads.parameter_digest != plain.parameter_digest);
    std::ifstream json(options.summary_path);
    CHECK(nlohmann::json::parse(json).at("precision") == "bf16");
    // Backprop too.
    options = quick(data, "backprop", 1);
    const fashion::job_summary backprop_fp32 = fashion::run_job(options);
    options.precision = "bf16";
    CHECK(fashion::run_job(options).parameter_digest != backprop_fp32.parameter_digest);
}

TEST_CASE("fashion_mnist job: every stage count up to the block count, the same numbers on threads and the simulator")
{
    // J = 1 to the block count (one stage per block), one epoch of 20
    // micro-batches each: the threads and the simulator end with the same
    // parameters, and each J with its own (the delays differ), which shows
    // that every J reaches a pipeline of its own. (Over fewer micro-batches
    // than a stage's delay no forward sees an update, and two J may then
    // end alike: over 4 micro-batches J = 5, 6 and 7 do.)
    const generated_data data;
    std::vector<std::string> digests;
    for (std::size_t stages = 1; stages <= fashion::reference_net::block_count; ++stages) {
        CAPTURE(stages);
        auto options = quick(data, "petra", stages);
        options.epochs = 1;
        const auto [threads, simulator] = on_threads_and_simulator(options);
        CHECK(threads.steps == 20);
        CHECK(threads.recipe.stages == stages);
        // The summary names the cut: J ranges of blocks, none empty, all blocks.
        REQUIRE(threads.cuts.size() == stages + 1);
        CHECK(threads.cuts.front() == 0);
        CHECK(threads.cuts.back() == fashion::reference_net::block_count);
        CHECK(std::adjacent_find(threads.cuts.begin(), threads.cuts.end(), std::greater_equal<>()) ==
              threads.cuts.end());
        CHECK(threads.cuts == simulator.cuts);
        CHECK(threads.cuts == fashion::cuts_at<fashion::reference_net>(stages));
        CHECK(simulator.parameter_digest == threads.parameter_digest);
        CHECK(simulator.test_accuracy == threads.test_accuracy);
        digests.push_back(threads.parameter_digest);
    }
    std::sort(digests.begin(), digests.end());
    CHECK(std::adjacent_find(digests.begin(), digests.end()) == digests.end());
    // cuts_at is the compile-time cut of the J asked.
    const auto as_vector = [](const auto& cuts) { return std::vector<std::size_t>(cuts.begin(), cuts.end()); };
    CHECK(fashion::cuts_at<fashion::reference_net>(4) == as_vector(fashion::cuts_of<fashion::reference_net, 4>));
    CHECK(fashion::cuts_at<fashion::reversible_net>(3) == as_vector(fashion::cuts_of<fashion::reversible_net, 3>));
    CHECK(fashion::cuts_at<fashion::reference_net>(10) == std::vector<std::size_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10});

    // Every block its own stage over an epoch's end, k = 2: stage 0 is
    // 2 (J - 1) = 18 ticks behind, and the drain finishes what is in flight.
    auto options = quick(data, "petra", fashion::reference_net::block_count);
    options.epochs = 2;
    options.max_steps = 30; // 20 micro-batches per epoch
    options.accumulation = 2;
    const auto [threads, simulator] = on_threads_and_simulator(options);
    CHECK(threads.epochs_run == 2);
    CHECK(simulator.parameter_digest == threads.parameter_digest);
    CHECK(simulator.epochs.front().train_loss == threads.epochs.front().train_loss);
    CHECK(simulator.test_accuracy == threads.test_accuracy);
}

TEST_CASE("fashion_mnist job: the reversible network, the same numbers on threads and the simulator, its own")
{
    // J = 3 and 10 (one stage count of each group of runs), one epoch of 20
    // micro-batches: the drivers agree, and the network trained is not the
    // reference network (other parameters, other digest); so is backprop's.
    const generated_data data;
    for (const std::size_t stages : {std::size_t(3), fashion::reversible_net::block_count}) {
        CAPTURE(stages);
        auto options = quick(data, "petra", stages);
        options.epochs = 1;
        const fashion::job_summary reference = fashion::run_job(options);
        options.network = "reversible";
        const auto [threads, simulator] = on_threads_and_simulator(options);
        CHECK(threads.recipe.network == fashion::network_kind::reversible);
        CHECK(threads.cuts == fashion::cuts_at<fashion::reversible_net>(stages));
        CHECK(threads.steps == 20);
        CHECK(simulator.parameter_digest == threads.parameter_digest);
        CHECK(simulator.test_accuracy == threads.test_accuracy);
        CHECK(threads.parameter_digest != reference.parameter_digest);
    }
    auto options = quick(data, "backprop", 1);
    options.epochs = 1;
    const fashion::job_summary reference = fashion::run_job(options);
    options.network = "reversible";
    const fashion::job_summary reversible = fashion::run_job(options);
    CHECK(reversible.recipe.network == fashion::network_kind::reversible);
    CHECK(reversible.parameter_digest != reference.parameter_digest);
}

namespace {

// The metrics of a run without the seconds column (time differs between
// runs; everything else must not).
std::vector<std::string> metrics_without_time(const std::string& path)
{
    std::ifstream csv(path);
    std::vector<std::string> rows;
    for (std::string line; std::getline(csv, line);) {
        std::vector<std::string> fields = csv_fields(line);
        REQUIRE(fields.size() == 16);
        fields.erase(fields.begin() + 10); // seconds
        std::string kept;
        for (const std::string& field : fields) kept += field + ",";
        rows.push_back(kept);
    }
    return rows;
}

} // namespace

TEST_CASE("fashion_mnist job: a run stopped and resumed from its checkpoint ends as an uninterrupted run")
{
    const generated_data data;
    for (const auto& run : {std::pair<std::string, std::size_t>{"petra", 3}, {"backprop", 1}}) {
        const std::string& method = run.first;
        const std::size_t stages = run.second;
        CAPTURE(method);
        auto options = quick(data, method, stages);
        options.epochs = 3;
        options.augment = true; // the generator's state must come back too
        options.checkpoint_every = 7;
        options.metrics_path = (data.dir / (method + "-whole.csv")).string();
        const fashion::job_summary whole = fashion::run_job(options);
        REQUIRE(!whole.interrupted);

        // Stopped at step 27 (epoch 2, micro-batch 7), then at step 41.
        options.metrics_path = (data.dir / (method + "-resumed.csv")).string();
        options.checkpoint_path = (data.dir / (method + ".checkpoint")).string();
        std::size_t asked = 0;
        std::size_t stop_at = 27;
        options.stop_requested = [&] { return asked++ == stop_at; };
        fashion::job_summary part = fashion::run_job(options);
        CHECK(part.interrupted);
        CHECK(part.steps == 27);
        CHECK(part.position_epoch == 1);
        CHECK(part.position_batch == 7);
        CHECK(metrics_without_time(options.metrics_path).size() == 2); // the header and epoch 1

        options.resume = true;
        asked = 0;
        stop_at = 41 - 27;
        part = fashion::run_job(options);
        CHECK(part.interrupted);
        CHECK(part.steps == 41);

        options.stop_requested = nullptr;
        const fashion::job_summary resumed = fashion::run_job(options);
        REQUIRE(!resumed.interrupted);
        CHECK(resumed.steps == whole.steps);
        CHECK(resumed.parameter_digest == whole.parameter_digest);
        CHECK(resumed.test_accuracy == whole.test_accuracy);
        CHECK(resumed.epochs_run == 3);
        const std::string whole_metrics = (data.dir / (method + "-whole.csv")).string();
        CHECK(metrics_without_time(options.metrics_path) == metrics_without_time(whole_metrics));
        // A finished run's checkpoint resumes to the same end without training.
        const fashion::job_summary again = fashion::run_job(options);
        CHECK(again.parameter_digest == whole.parameter_digest);
        CHECK(again.steps == whole.steps);
    }
}

TEST_CASE("fashion_mnist job: checkpoints of other options, corrupted ones and overwrites are refused")
{
    const generated_data data;
    auto options = quick(data, "petra", 2);
    options.epochs = 1;
    options.checkpoint_path = (data.dir / "run.checkpoint").string();
    std::size_t asked = 0;
    options.stop_requested = [&] { return asked++ == 5; };
    REQUIRE(fashion::run_job(options).interrupted);
    options.stop_requested = nullptr;

    // Starting again without --resume would overwrite it.
    CHECK_THROWS_WITH_AS(fashion::run_job(options), doctest::Contains("exists: pass --resume"), std::invalid_argument);
    options.resume = true;
    auto other = options;
    other.learning_rate = 0.1;
    CHECK_THROWS_WITH_AS(fashion::run_job(other),
                         doctest::Contains("--lr: the checkpoint's run used 0.05, this command asks for 0.1"),
                         std::invalid_argument);
    other = options;
    other.stages = 3;
    CHECK_THROWS_WITH_AS(fashion::run_job(other), doctest::Contains("--stages: the checkpoint's run used 2"),
                         std::invalid_argument);
    other = options;
    other.delay_rate_exponent = 0.5;
    CHECK_THROWS_WITH_AS(fashion::run_job(other),
                         doctest::Contains("--delay-rate-exponent: the checkpoint's run used 0, this command asks for "
                                           "0.5"),
                         std::invalid_argument);
    other = options;
    other.method = "backprop";
    CHECK_THROWS_WITH_AS(fashion::run_job(other), doctest::Contains("--method"), std::invalid_argument);
    other = options;
    other.network = "reversible";
    CHECK_THROWS_WITH_AS(fashion::run_job(other), doctest::Contains("was written for another network"),
                         petra::checkpoint_error);

    // One byte changed anywhere: refused before anything is loaded.
    std::string bytes;
    {
        std::ifstream in(options.checkpoint_path, std::ios::binary);
        bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    bytes[bytes.size() / 3] ^= 0x20;
    {
        std::ofstream out(options.checkpoint_path, std::ios::binary | std::ios::trunc);
        out << bytes;
    }
    CHECK_THROWS_WITH_AS(fashion::run_job(options), doctest::Contains("is corrupted"), petra::checkpoint_error);

    options.checkpoint_path = (data.dir / "missing.checkpoint").string();
    CHECK_THROWS_WITH_AS(fashion::run_job(options), doctest::Contains("cannot be opened"), petra::checkpoint_error);
    options.checkpoint_path.clear();
    CHECK_THROWS_WITH_AS(fashion::run_job(options), doctest::Contains("--resume needs --checkpoint"),
                         std::invalid_argument);
}

namespace {

struct fidelity_row {
    std::size_t epoch, step, stage, micro_batch;
    double cosine, norm_ratio;
};

std::vector<fidelity_row> read_fidelity(const std::string& path)
{
    std::ifstream csv(path);
    std::string line;
    std::getline(csv, line);
    CHECK(line == "method,stages,accumulation,seed,epoch,step,stage,micro_batch,cosine,norm_ratio,network,"
                  "peak_learning_rate,warmup_epochs,delay_rate_exponent");
    std::vector<fidelity_row> rows;
    while (std::getline(csv, line)) {
        std::vector<std::string> fields = csv_fields(line);
        REQUIRE(fields.size() == 14);
        CHECK(fields[10] == "reference");
        rows.push_back({std::stoul(fields[4]), std::stoul(fields[5]), std::stoul(fields[6]), std::stoul(fields[7]),
                        std::stod(fields[8]), std::stod(fields[9])});
    }
    return rows;
}

} // namespace

TEST_CASE("fashion_mnist job: gradient fidelity is measured per stage, and measuring changes nothing")
{
    const generated_data data;
    // With a learning rate of almost zero the parameters do not move, so
    // PETRA's gradients are the true ones up to rounding: the measurement
    // must find cosine 1 and norm ratio 1 on every stage, which it does only
    // if it pairs each stage with the right micro-batch, slice and sum
    // (accumulation 2: the sums span several ticks).
    auto options = quick(data, "petra", 3);
    options.epochs = 2;
    options.accumulation = 2;
    options.learning_rate = 1e-12;
    options.warmup_epochs = 0;
    options.augment = true;
    options.fidelity_every = 3;
    options.metrics_path = (data.dir / "still.csv").string();
    fashion::run_job(options);
    const auto still = read_fidelity(fashion::fidelity_path_of(options.metrics_path));
    // 20 micro-batches per epoch; ticks 4 to 19 can be measured (a stage
    // differentiates micro-batches up to 4 ticks old), every third step.
    std::size_t measured = 0;
    for (std::size_t step = 3; step <= 40; step += 3) measured += ((step - 1) % 20) >= 4 ? 1 : 0;
    CHECK(still.size() == 3 * measured);
    for (const fidelity_row& row : still) {
        CAPTURE(row.step);
        CAPTURE(row.stage);
        CHECK(row.cosine > 0.9999);
        CHECK(row.norm_ratio == doctest::Approx(1.0).epsilon(1e-3));
        CHECK(row.micro_batch == (row.step - 1) % 20 - 2 * (3 - 1) + row.stage);
    }

    // At a real learning rate: the same run with and without measurements
    // ends with the same parameters; the gradients are close to, not equal
    // to, the true ones.
    options.learning_rate = 0.05;
    options.accumulation = 1;
    options.metrics_path = (data.dir / "moving.csv").string();
    const fashion::job_summary measured_run = fashion::run_job(options);
    options.fidelity_every = 0;
    const fashion::job_summary plain_run = fashion::run_job(options);
    CHECK(measured_run.parameter_digest == plain_run.parameter_digest);
    const auto moving = read_fidelity(fashion::fidelity_path_of((data.dir / "moving.csv").string()));
    REQUIRE(!moving.empty());
    // Positively correlated on every stage, on average over the run: a
    // single measurement of a 64-example micro-batch may come out nearly
    // orthogonal on the stalest stage (the rounding of the batch statistics
    // changed once and turned step 36's stage 0 from cosine 0.41 to -0.03,
    // the other 29 rows moving by a few hundredths), so each row is only
    // kept from pointing away.
    double lowest = 1;
    std::array<double, 3> cosine_sums{};
    std::array<std::size_t, 3> counts{};
    for (const fidelity_row& row : moving) {
        CHECK(row.cosine > -0.25);
        CHECK(row.cosine <= 1.0 + 1e-9);
        CHECK(row.norm_ratio > 0.2);
        CHECK(row.norm_ratio < 5.0);
        lowest = std::min(lowest, row.cosine);
        REQUIRE(row.stage < 3);
        cosine_sums[row.stage] += row.cosine;
        ++counts[row.stage];
    }
    for (std::size_t stage = 0; stage < 3; ++stage) {
        CAPTURE(stage);
        REQUIRE(counts[stage] > 0);
        CHECK(cosine_sums[stage] / double(counts[stage]) > 0.3);
    }
    CHECK(lowest < 0.9999);

    // Only PETRA has delayed gradients to measure.
    options.fidelity_every = 3;
    options.method = "backprop";
    CHECK_THROWS_WITH_AS(fashion::run_job(options), doctest::Contains("needs --method petra"), std::invalid_argument);
}

TEST_CASE("fashion_mnist job: a checkpoint saved after the run's last micro-batch resumes into the final epoch's end")
{
    // As if the process died while draining or scoring the last epoch: the
    // checkpoint holds micro-batches still in flight, which must be
    // drained, scored and recorded on resume.
    const generated_data data;
    auto options = quick(data, "petra", 2);
    options.epochs = 2;
    const fashion::job_summary whole = fashion::run_job(options);
    options.checkpoint_path = (data.dir / "run.checkpoint").string();
    options.checkpoint_every = 40; // the run's 40th and last micro-batch
    // PETRA's checkpoint is a manifest and a shard per stage beside it: the
    // copy takes every file, into a directory of its own.
    const std::filesystem::path kept = data.dir / "kept";
    const std::string last = (kept / "run.checkpoint").string();
    options.checkpoint_saved = [&](std::size_t step) {
        if (step != 40 || std::filesystem::exists(last)) return;
        std::filesystem::create_directories(kept);
        for (const auto& entry : std::filesystem::directory_iterator(data.dir)) {
            if (entry.path().filename().string().starts_with("run.checkpoint")) {
                std::filesystem::copy_file(entry.path(), kept / entry.path().filename());
            }
        }
    };
    fashion::run_job(options);
    REQUIRE(std::filesystem::exists(last));
    options.checkpoint_path = last;
    options.checkpoint_saved = nullptr;
    options.resume = true;
    const fashion::job_summary resumed = fashion::run_job(options);
    CHECK(resumed.epochs_run == 2);
    CHECK(resumed.parameter_digest == whole.parameter_digest);
    CHECK(resumed.test_accuracy == whole.test_accuracy);

    // Another batch size: named as such.
    options.batch = 32;
    CHECK_THROWS_WITH_AS(fashion::run_job(options), doctest::Contains("--batch: the checkpoint's run used 16"),
                         std::invalid_argument);
}
