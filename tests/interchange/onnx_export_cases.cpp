// Writes the cases check_onnx.py runs through ONNX's checker and OpenCV's
// dnn module: for each network, <case>.onnx (export_onnx), the images
// (<case>.images.npy), petra's predict logits of them (<case>.logits.npy)
// and the network's named arrays with their shapes (<case>.arrays.txt, one
// "name extent..." a line); cases.txt lists the cases written.
//
//   onnx_export_cases <output directory> [<Fashion-MNIST directory>]
//
// Every network gets non-trivial parameters and running statistics: a few
// steps of exact backprop (which move the running statistics), and for the
// networks on generated images also random batch-norm scales, shifts and
// running statistics. The reference networks run on the first real test
// images of Fashion-MNIST; without the data set they are left out (and the
// script reports the test skipped).
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <petra/interchange/onnx.hpp>
#include <petra/petra.hpp>

using namespace petra;

namespace {

// Every block kind: a stem whose convolution pads nothing, a coupling whose
// F is one layer, a revnet coupling with relu before a batch norm (not
// fused) and a chain inside a chain, pixel_unshuffle, the reference
// downsampling (3x3 and 1x1 convolutions of stride 2), a head with batch
// norm, pooling, flatten and dense.
using every_kind = network<
    input<3, 10, 10>, stem<chain<conv2d<3, 8, 3, 1, 0>, batch_norm<8>, relu>>, additive_coupling<conv2d<4, 4>>,
    revnet_coupling<chain<relu, batch_norm<4>, conv2d<4, 4, 1>>, chain<chain<conv2d<4, 4>, batch_norm<4>>, relu>>,
    pixel_unshuffle, downsampling<16>, additive_coupling<residual_function<32>>,
    head<chain<batch_norm<64>, relu, global_average_pool, flatten, dense<64, 5>>>>;

// A head whose dense layer reads the [C, H, W] values of each example in
// order (no pooling), behind a ReLU that is not fused; then layers on the
// dense layer's flat output: a batch norm, a 1x1 convolution and pooling
// (which see it as 12 channels of 1 x 1), and another dense layer.
using dense_head = network<input<2, 8, 8>, stem<chain<conv2d<2, 4>, batch_norm<4>, relu>>, pixel_unshuffle,
                           revnet_coupling<conv2d<8, 8>, chain<batch_norm<8>, relu>>,
                           head<chain<relu, dense<16 * 4 * 4, 12>, batch_norm<12>, relu, conv2d<12, 6, 1, 1, 0>,
                                      global_average_pool, dense<6, 3>>>>;

// A .npy file (NumPy format 1.0) of little-endian float32 values.
void write_npy(const std::filesystem::path& path, const std::vector<std::size_t>& shape,
               const std::vector<float>& values)
{
    std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (";
    for (const std::size_t extent : shape) header += std::to_string(extent) + ", ";
    header += "), }";
    // Magic (6), version (2), header length (2), then the header padded
    // with spaces and ended by a newline to a multiple of 64 bytes.
    while ((10 + header.size() + 1) % 64 != 0) header += ' ';
    header += '\n';
    std::string bytes = "\x93NUMPY";
    bytes += '\x01';
    bytes += '\x00';
    protobuf::message::append_little_endian(bytes, header.size(), 2);
    bytes += header;
    for (const float value : values)
        protobuf::message::append_little_endian(bytes, std::bit_cast<std::uint32_t>(value), 4);
    std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A few steps of plain SGD on exact backprop's gradients: trained
// parameters, and running statistics moved by the training passes.
template <class Network, class T>
void train(network_parameters<Network, T>& parameters, const std::vector<T>& images,
           const std::vector<std::int32_t>& labels, std::size_t batch, std::size_t steps)
{
    exact_backprop<Network, T> trainer(batch);
    std::vector<T> gradient(Network::parameter_count);
    const std::size_t batches = labels.size() / batch;
    for (std::size_t step = 0; step < steps; ++step) {
        const std::size_t b = step % batches;
        std::fill(gradient.begin(), gradient.end(), T(0));
        trainer.accumulate_gradient(parameters, batch, images.data() + b * batch * Network::input::size,
                                    labels.data() + b * batch, gradient);
        for (std::size_t i = 0; i < gradient.size(); ++i) parameters.values()[i] -= T(0.05) * gradient[i];
    }
}

// Batch-norm scales and shifts, running means and variances drawn at
// random (variances positive), found by their names.
template <class Network, class T>
void randomise_normalisation(network_parameters<Network, T>& parameters, std::uint64_t seed)
{
    std::mt19937_64 generator(seed);
    for (const named_array& array : Network::parameter_names()) {
        const std::string_view name = array.name.view();
        const auto ends = [&](std::string_view suffix) { return name.ends_with(suffix); };
        std::array<double, 2> range{}; // the values' interval, none when empty
        if (ends(".running_var")) range = {0.3, 2.0};
        else if (ends(".running_mean")) range = {-0.5, 0.5};
        else if (array.rank == 1 && ends(".weight")) range = {0.5, 1.5}; // a batch norm's gamma (dense weights are 2-D)
        else if (ends(".bias")) range = {-0.5, 0.5};                     // a batch norm's beta, a dense layer's bias
        if (range[0] == range[1]) continue;
        const std::span<T> values = array.role == array_role::parameter ? parameters.values() : parameters.state();
        for (std::size_t i = 0; i < array.size(); ++i)
            values[array.offset + i] = T(uniform_real(generator, range[0], range[1]));
    }
}

// Writes one case: the model, the images, petra's logits, the arrays.
template <class Network, class T>
void write_case(const std::filesystem::path& directory, const std::string& name,
                const network_parameters<Network, T>& parameters, const std::vector<T>& images, std::size_t count)
{
    std::vector<T> logits(count * Network::output::size);
    predict(parameters, count, images.data(), logits.data());
    export_onnx(parameters, (directory / (name + ".onnx")).string());
    using in = typename Network::input;
    write_npy(directory / (name + ".images.npy"), {count, in::channels, in::height, in::width},
              std::vector<float>(images.begin(), images.begin() + static_cast<std::ptrdiff_t>(count * in::size)));
    write_npy(directory / (name + ".logits.npy"), {count, Network::output::size},
              std::vector<float>(logits.begin(), logits.end()));
    std::ofstream arrays(directory / (name + ".arrays.txt"));
    for (const named_array& array : Network::parameter_names()) {
        arrays << array.name.view();
        for (std::size_t axis = 0; axis < array.rank; ++axis) arrays << ' ' << array.extents[axis];
        arrays << '\n';
    }
    std::ofstream(directory / "cases.txt", std::ios::app) << name << '\n';
    std::cout << "wrote " << name << '\n';
}

// A network on generated images (normal values) and random labels.
template <class Network, class T>
void generated_case(const std::filesystem::path& directory, const std::string& name, std::uint64_t seed)
{
    constexpr std::size_t batch = 16, count = 48;
    std::mt19937_64 generator(seed);
    std::vector<T> images(count * Network::input::size);
    for (T& value : images) value = T(standard_normal(generator));
    std::vector<std::int32_t> labels(count);
    for (std::int32_t& label : labels) label = std::int32_t(generator() % Network::output::size);
    auto parameters = Network::template make_parameters<T>(seed);
    train(parameters, images, labels, batch, 3);
    randomise_normalisation(parameters, seed + 1);
    write_case(directory, name, parameters, images, count);
}

// A reference network trained a few steps on real training images, run on
// the first real test images.
template <class Network>
void fashion_case(const std::filesystem::path& directory, const std::string& name, const labelled_images& train_set,
                  const labelled_images& test_set)
{
    constexpr std::size_t batch = 32, steps = 8, count = 64;
    const std::vector<float> train_images(train_set.images.begin(),
                                          train_set.images.begin() + std::ptrdiff_t(batch * steps * 784));
    const std::vector<std::int32_t> train_labels(train_set.labels.begin(),
                                                 train_set.labels.begin() + std::ptrdiff_t(batch * steps));
    auto parameters = Network::template make_parameters<float>(7);
    train(parameters, train_images, train_labels, batch, steps);
    const std::vector<float> test_images(test_set.images.begin(),
                                         test_set.images.begin() + std::ptrdiff_t(count * 784));
    write_case(directory, name, parameters, test_images, count);
}

} // namespace

int main(int argc, char** argv)
{
    if (argc < 2) {
        std::cerr << "usage: onnx_export_cases <output directory> [<Fashion-MNIST directory>]\n";
        return 2;
    }
    const std::filesystem::path directory = argv[1];
    std::filesystem::remove_all(directory);
    std::filesystem::create_directories(directory);
    generated_case<every_kind, float>(directory, "every_kind", 11);
    generated_case<every_kind, double>(directory, "every_kind_double", 12);
    generated_case<dense_head, float>(directory, "dense_head", 13);

    const std::string data = argc > 2 ? argv[2] : "/usr/share/datasets/fashion-mnist";
    if (!std::filesystem::exists(data + "/t10k-images-idx3-ubyte.gz")) {
        std::cout << "no Fashion-MNIST at " << data << ": the reference networks are left out\n";
        return 0;
    }
    const auto train_set = load_idx_dataset(data + "/train-images-idx3-ubyte.gz", data + "/train-labels-idx1-ubyte.gz",
                                            10, fashion_mnist_normalisation);
    const auto test_set = load_idx_dataset(data + "/t10k-images-idx3-ubyte.gz", data + "/t10k-labels-idx1-ubyte.gz", 10,
                                           fashion_mnist_normalisation);
    fashion_case<reference_network<>>(directory, "reference_network", train_set, test_set);
    fashion_case<reversible_reference_network<>>(directory, "reversible_reference_network", train_set, test_set);
    return 0;
}
