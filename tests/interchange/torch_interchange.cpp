// petra's side of the PyTorch interchange test (check_torch.py drives it):
// weights in and out as .npz files keyed by the arrays' names, and the
// logits petra computes with them on real Fashion-MNIST test images.
//
//   torch_interchange names NETWORK
//       prints each named array of the network, one a line: name, then its
//       shape with commas ("blocks.0.f.0.weight 32,1,3,3").
//   torch_interchange predict NETWORK WEIGHTS.npz DATA_DIR COUNT OUT.npz
//       loads WEIGHTS.npz (load_npz) and writes to OUT.npz the first COUNT
//       test images as petra normalises them ("images", COUNT x 1 x 28 x 28)
//       and predict's logits on them ("logits", COUNT x classes).
//   torch_interchange train NETWORK DATA_DIR COUNT STEPS WEIGHTS.npz OUT.npz
//       trains the network from make_parameters(1) for STEPS steps of exact
//       backprop and SGD (batches of up to 32 of the first COUNT test
//       images), so that weights and running statistics move; writes them
//       with save_npz, and OUT.npz as predict does.
// NETWORK: reference (reference_network<>) or reversible
// (reversible_reference_network<>). Exit status 1 with a sentence on stderr
// for any error, 2 for a wrong command line.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <iostream>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <petra/data.hpp>
#include <petra/interchange/npz.hpp>
#include <petra/models/reference_network.hpp>
#include <petra/models/reversible_reference_network.hpp>
#include <petra/network.hpp>
#include <petra/optim/sgd.hpp>
#include <petra/train/exact_backprop.hpp>

namespace {

struct test_images {
    std::vector<float> images;        // count x 1 x 28 x 28, normalised as petra's job does
    std::vector<std::int32_t> labels; // count
    std::size_t count = 0;
};

// The first `count` images of the Fashion-MNIST test set in data_dir.
test_images first_test_images(const std::string& data_dir, std::size_t count)
{
    const petra::labelled_images all =
        petra::load_idx_dataset(data_dir + "/t10k-images-idx3-ubyte.gz", data_dir + "/t10k-labels-idx1-ubyte.gz", 10,
                                petra::fashion_mnist_normalisation);
    if (count == 0 || count > all.size()) {
        throw std::invalid_argument("COUNT must be between 1 and the " + std::to_string(all.size()) +
                                    " test images, not " + std::to_string(count) + ".");
    }
    test_images chosen;
    chosen.count = count;
    chosen.images.assign(all.images.begin(), all.images.begin() + std::ptrdiff_t(count * all.image_size()));
    chosen.labels.assign(all.labels.begin(), all.labels.begin() + std::ptrdiff_t(count));
    return chosen;
}

// The images and predict's logits on them, to `path`.
template <class Network, class Parameters>
void write_predictions(const Parameters& parameters, const test_images& data, const std::string& path)
{
    using input = typename Network::input;
    constexpr std::size_t classes = Network::output::size;
    std::vector<float> logits(data.count * classes);
    petra::predict(parameters, data.count, data.images.data(), logits.data());
    petra::npz_writer out(path);
    const std::array<std::size_t, 4> image_shape{data.count, input::channels, input::height, input::width};
    const std::array<std::size_t, 2> logit_shape{data.count, classes};
    out.add(std::string_view("images"), std::span<const float>(data.images), std::span<const std::size_t>(image_shape));
    out.add(std::string_view("logits"), std::span<const float>(logits), std::span<const std::size_t>(logit_shape));
    out.commit();
}

template <class Network>
void print_names()
{
    for (const petra::named_array& array : Network::parameter_names()) {
        std::cout << array.name.view() << ' ';
        for (std::size_t axis = 0; axis < array.rank; ++axis) {
            std::cout << (axis > 0 ? "," : "") << array.extents[axis];
        }
        std::cout << '\n';
    }
}

template <class Network>
void predict_from(const std::string& weights, const std::string& data_dir, std::size_t count, const std::string& out)
{
    // Every array is overwritten by the file; the seed does not matter.
    auto parameters = Network::template make_parameters<float>(1);
    petra::load_npz(weights, parameters);
    write_predictions<Network>(parameters, first_test_images(data_dir, count), out);
}

template <class Network>
void train_and_save(const std::string& data_dir, std::size_t count, std::size_t steps, const std::string& weights,
                    const std::string& out)
{
    const test_images data = first_test_images(data_dir, count);
    const std::size_t batch = std::min<std::size_t>(32, count);
    auto parameters = Network::template make_parameters<float>(1);
    petra::exact_backprop<Network, float> trainer(batch);
    const auto mask = Network::template weight_mask<float>();
    petra::sgd<float> optimizer(petra::sgd_options{}, std::span<const float>(mask.data(), mask.size()));
    std::vector<float> gradient(Network::parameter_count);
    for (std::size_t step = 0; step < steps; ++step) {
        // Consecutive windows of the images, wrapping around.
        const std::size_t first = (step * batch) % (count - batch + 1);
        std::fill(gradient.begin(), gradient.end(), 0.0f);
        trainer.accumulate_gradient(parameters, batch, data.images.data() + first * Network::input::size,
                                    data.labels.data() + first, gradient);
        optimizer.step(parameters.values(), gradient, 1, 0.05);
    }
    petra::save_npz(weights, parameters);
    write_predictions<Network>(parameters, data, out);
}

std::size_t count_argument(const std::string& text, std::string_view what)
{
    const bool digits_only =
        !text.empty() && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!digits_only || text.size() > 9) {
        throw std::invalid_argument(std::string(what) + " must be a count below a billion, not '" + text + "'.");
    }
    return std::size_t(std::stoul(text));
}

template <class Network>
int run(const std::vector<std::string>& arguments)
{
    const std::string& command = arguments[0];
    if (command == "names" && arguments.size() == 2) {
        print_names<Network>();
    } else if (command == "predict" && arguments.size() == 6) {
        predict_from<Network>(arguments[2], arguments[3], count_argument(arguments[4], "COUNT"), arguments[5]);
    } else if (command == "train" && arguments.size() == 7) {
        train_and_save<Network>(arguments[2], count_argument(arguments[3], "COUNT"),
                                count_argument(arguments[4], "STEPS"), arguments[5], arguments[6]);
    } else {
        return 2;
    }
    return 0;
}

constexpr const char* usage = "usage: torch_interchange names NETWORK\n"
                              "       torch_interchange predict NETWORK WEIGHTS.npz DATA_DIR COUNT OUT.npz\n"
                              "       torch_interchange train NETWORK DATA_DIR COUNT STEPS WEIGHTS.npz OUT.npz\n"
                              "NETWORK: reference or reversible\n";

} // namespace

int main(int argc, char** argv)
{
    const std::vector<std::string> arguments(argv + 1, argv + argc);
    int status = 2;
    try {
        if (arguments.size() >= 2 && arguments[1] == "reference") {
            status = run<petra::reference_network<>>(arguments);
        } else if (arguments.size() >= 2 && arguments[1] == "reversible") {
            status = run<petra::reversible_reference_network<>>(arguments);
        }
    } catch (const std::exception& error) {
        std::cerr << "torch_interchange: " << error.what() << '\n';
        return 1;
    }
    if (status == 2) std::cerr << usage;
    return status;
}
