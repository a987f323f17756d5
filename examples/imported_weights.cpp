// Weights trained elsewhere, served by petra: a reference network's weights
// in an .npz file, named as petra names them (parameter_names.hpp; a PyTorch
// state_dict converted by scripts/torch_weights, or petra's own save_npz),
// loaded into static storage and run on the Fashion-MNIST test set with
// predict in a static workspace. Loading the file's bytes and every
// prediction allocate nothing; only reading the files does.
//
// Usage: imported_weights WEIGHTS.npz [--network reference|reversible]
//                         [--data-dir DIR] [--count N]
// Prints the test accuracy of the first N test images (all by default).
// Exit status 1 for a file the network cannot take (the sentence says why).
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include <petra/interchange/npz.hpp>
#include <petra/petra.hpp>

using namespace petra;

namespace {

constexpr std::size_t batch = 100;

struct arguments {
    std::string weights;
    std::string network = "reference";
    std::string data_dir = "/usr/share/datasets/fashion-mnist";
    std::size_t count = 0; // 0: every test image
};

// The caller's storage for one network, static: parameters, running
// statistics and predict's workspace.
template <class Net>
struct static_model {
    static inline std::array<float, Net::parameter_count> values;
    static inline std::array<float, Net::state_count> state;
    alignas(64) static inline std::array<std::byte, Net::inference_workspace_bytes(batch)> workspace;
};

// The file's bytes in memory (this allocates: the rest does not).
std::vector<std::byte> read_file(const std::string& path)
{
    std::FILE* file = std::fopen(path.c_str(), "rb");
    if (file == nullptr) throw std::runtime_error("'" + path + "' cannot be opened.");
    std::vector<std::byte> bytes;
    std::array<std::byte, 1 << 16> chunk;
    for (std::size_t got; (got = std::fread(chunk.data(), 1, chunk.size(), file)) > 0;) {
        bytes.insert(bytes.end(), chunk.begin(), chunk.begin() + std::ptrdiff_t(got));
    }
    std::fclose(file);
    return bytes;
}

template <class Net>
int score(const arguments& asked)
{
    using model = static_model<Net>;
    const network_parameters_view<Net, float> parameters(model::values, model::state);
    const std::vector<std::byte> file = read_file(asked.weights);
    load_npz(std::span<const std::byte>(file), parameters, asked.weights);

    const labelled_images test =
        load_idx_dataset(asked.data_dir + "/t10k-images-idx3-ubyte.gz", asked.data_dir + "/t10k-labels-idx1-ubyte.gz",
                         Net::output::size, fashion_mnist_normalisation);
    const std::size_t count = asked.count == 0 ? test.size() : std::min(asked.count, test.size());
    std::array<float, batch * Net::output::size> logits;
    std::size_t correct = 0;
    for (std::size_t first = 0; first < count; first += batch) {
        const std::size_t examples = std::min(batch, count - first);
        predict(network_parameters_view<Net, const float>(parameters), examples,
                test.images.data() + first * Net::input::size, logits.data(), model::workspace);
        for (std::size_t n = 0; n < examples; ++n) {
            const float* row = logits.data() + n * Net::output::size;
            const auto guess = std::size_t(std::max_element(row, row + Net::output::size) - row);
            correct += std::int32_t(guess) == test.labels[first + n];
        }
    }
    std::printf("%s network, weights %s: test accuracy %.2f%% on %zu images\n", asked.network.c_str(),
                asked.weights.c_str(), 100.0 * double(correct) / double(count), count);
    return 0;
}

arguments parse(int argc, char** argv)
{
    arguments asked;
    for (int i = 1; i < argc; ++i) {
        const std::string argument = argv[i];
        const bool has_value = i + 1 < argc;
        if (argument == "--network" && has_value) asked.network = argv[++i];
        else if (argument == "--data-dir" && has_value) asked.data_dir = argv[++i];
        else if (argument == "--count" && has_value) asked.count = std::stoul(argv[++i]);
        else if (asked.weights.empty() && !argument.starts_with("--")) asked.weights = argument;
        else throw std::invalid_argument("unexpected argument '" + argument + "'");
    }
    if (asked.weights.empty()) throw std::invalid_argument("the weights file is missing");
    if (asked.network != "reference" && asked.network != "reversible") {
        throw std::invalid_argument("--network must be reference or reversible, not '" + asked.network + "'");
    }
    return asked;
}

} // namespace

int main(int argc, char** argv)
{
    arguments asked;
    try {
        asked = parse(argc, argv);
    } catch (const std::exception& error) {
        std::fprintf(stderr,
                     "imported_weights: %s\nusage: imported_weights WEIGHTS.npz [--network reference|reversible] "
                     "[--data-dir DIR] [--count N]\n",
                     error.what());
        return 2;
    }
    try {
        return asked.network == "reference" ? score<reference_network<>>(asked)
                                            : score<reversible_reference_network<>>(asked);
    } catch (const std::exception& error) {
        std::fprintf(stderr, "imported_weights: %s\n", error.what());
        return 1;
    }
}
