// Tensors as batches: xtensor containers and views of the caller's memory
// reach predict, the trainers, the pipelines and augmentation as the same
// numbers as pointers do, and a tensor of another shape, a non-contiguous one
// or labels that do not fit are refused with messages naming both shapes.
#include <cstddef>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <vector>

#include <doctest/doctest.h>

#include <xtensor/xadapt.hpp>
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

#include <petra/petra.hpp>

#include "support.hpp"

using namespace petra;

namespace {

using small_network = network<input<1, 6, 6>, stem<chain<conv2d<1, 8>, batch_norm<8>, relu>>,
                              additive_coupling<residual_function<4>>, downsampling<4>, classifier_head<16, 3>>;

xt::xtensor<float, 4> random_images(std::size_t count, std::mt19937_64& generator)
{
    xt::xtensor<float, 4> images = xt::xtensor<float, 4>::from_shape({count, 1, 6, 6});
    for (float& value : images) value = petra::uniform_real(generator, -1.0f, 1.0f);
    return images;
}

xt::xtensor<std::int32_t, 1> random_labels(std::size_t count, std::mt19937_64& generator)
{
    xt::xtensor<std::int32_t, 1> labels = xt::xtensor<std::int32_t, 1>::from_shape({count});
    for (std::int32_t& value : labels) value = petra::uniform_int(generator, std::int32_t{0}, std::int32_t{2});
    return labels;
}

} // namespace

TEST_CASE("tensors: a container, an adapted array and a view of rows are batches of the network's input")
{
    std::mt19937_64 generator(1);
    const auto images = random_images(5, generator);
    const auto x = as_batch<small_network::input>(images, "test");
    CHECK(x.batch() == 5);
    CHECK(x.data() == images.data());

    std::vector<float> memory(images.begin(), images.end());
    const auto adapted =
        xt::adapt(memory.data(), memory.size(), xt::no_ownership(), std::vector<std::size_t>{5, 1, 6, 6});
    CHECK(as_batch<small_network::input>(adapted, "test").data() == memory.data());

    // Rows 2 and 3: the view starts past the container's first value.
    const auto rows = xt::view(images, xt::range(2, 4));
    const auto middle = as_batch<small_network::input>(rows, "test");
    CHECK(middle.batch() == 2);
    CHECK(middle.data() == images.data() + 2 * 36);

    // Logits of shape<3> are a tensor of N x 3.
    xt::xtensor<float, 2> logits = xt::xtensor<float, 2>::from_shape({5, 3});
    CHECK(as_batch<small_network::output>(logits, "test").batch() == 5);
}

TEST_CASE("tensors: another shape, a strided view or labels that do not fit are refused, naming both shapes")
{
    std::mt19937_64 generator(2);
    const auto parameters = small_network::make_parameters<float>(1);
    const xt::xtensor<float, 3> flat = xt::xtensor<float, 3>::from_shape({4, 6, 6});
    CHECK_THROWS_WITH_AS(predict(parameters, flat),
                         "predict: images: a tensor of shape (4, 6, 6); the network takes (N, 1, 6, 6).",
                         std::invalid_argument);
    const auto images = random_images(6, generator);
    const auto every_other = xt::view(images, xt::range(0, 6, 2));
    CHECK_THROWS_WITH_AS(predict(parameters, every_other),
                         "predict: images: the tensor's values are not contiguous in row-major order; pass a "
                         "container or an adapted contiguous array.",
                         std::invalid_argument);
    xt::xtensor<float, 2> logits = xt::xtensor<float, 2>::from_shape({6, 4});
    CHECK_THROWS_WITH_AS(predict(parameters, images, logits),
                         "predict: logits: a tensor of shape (6, 4); the network takes (N, 3).", std::invalid_argument);

    exact_backprop<small_network, float> trainer(6);
    auto trained = small_network::make_parameters<float>(1);
    std::vector<float> gradient(small_network::parameter_count);
    const auto labels = random_labels(5, generator);
    CHECK_THROWS_WITH_AS(trainer.accumulate_gradient(trained, images, labels, gradient),
                         "exact_backprop: labels: labels of shape (5) for a batch of 6 images; one label each.",
                         std::invalid_argument);
}

TEST_CASE("tensors: predict, both trainers and augmentation compute what the pointer forms compute")
{
    std::mt19937_64 generator(3);
    auto parameters = small_network::make_parameters<float>(2);
    const auto images = random_images(4, generator);
    const auto labels = random_labels(4, generator);

    std::vector<float> expected(4 * 3);
    predict(parameters, 4, images.data(), expected.data());
    const xt::xtensor<float, 2> logits = predict(parameters, images);
    CHECK(std::vector<float>(logits.begin(), logits.end()) == expected);
    // A view of rows 1 to 3 gives those rows' logits.
    const xt::xtensor<float, 2> some = predict(parameters, xt::view(images, xt::range(1, 3)));
    CHECK(std::vector<float>(some.begin(), some.end()) ==
          std::vector<float>(expected.begin() + 3, expected.begin() + 9));

    auto check_trainer = [&](auto& trainer) {
        auto by_pointer = small_network::make_parameters<float>(2), by_tensor = by_pointer;
        std::vector<float> pointer_gradient(small_network::parameter_count), tensor_gradient(pointer_gradient.size());
        const float pointer_loss =
            trainer.accumulate_gradient(by_pointer, 4, images.data(), labels.data(), pointer_gradient);
        const float tensor_loss = trainer.accumulate_gradient(by_tensor, images, labels, tensor_gradient);
        CHECK(pointer_loss == tensor_loss);
        CHECK(pointer_gradient == tensor_gradient);
    };
    exact_backprop<small_network, float> exact(4);
    reversible_backprop<small_network, float> reversible(4);
    check_trainer(exact);
    check_trainer(reversible);

    auto augmented = images;
    std::vector<float> by_pointer(images.begin(), images.end()), scratch;
    std::mt19937_64 first(9), second(9);
    const augmentation settings{.padding = 2, .flip = true, .fill = -1.0f};
    augment_batch(augmented, settings, first, scratch);
    augment_batch(by_pointer.data(), 4, 1, 6, 6, settings, second, scratch);
    CHECK(std::vector<float>(augmented.begin(), augmented.end()) == by_pointer);
}

TEST_CASE("tensors: a pipeline fed tensors trains as one fed pointers, and refuses a batch of another size")
{
    constexpr auto cuts = partition<small_network, 2>();
    std::mt19937_64 generator(4);
    std::vector<xt::xtensor<float, 4>> images;
    std::vector<xt::xtensor<std::int32_t, 1>> labels;
    for (int m = 0; m < 5; ++m) {
        images.push_back(random_images(3, generator));
        labels.push_back(random_labels(3, generator));
    }
    auto by_pointer = small_network::make_parameters<float>(3), by_tensor = by_pointer;
    const auto rate = [](std::size_t) { return 0.05; };
    sequential_pipeline<small_network, cuts, sgd<float>> pointers(by_pointer, sgd_options{}, rate, {.batch = 3});
    sequential_pipeline<small_network, cuts, sgd<float>> tensors(by_tensor, sgd_options{}, rate, {.batch = 3});
    for (int m = 0; m < 5; ++m) {
        pointers.feed(images[m].data(), labels[m].data());
        tensors.feed(images[m], labels[m]);
    }
    const epoch_statistics a = pointers.drain(), b = tensors.drain();
    CHECK(a.loss_sum == b.loss_sum);
    CHECK(std::equal(by_pointer.values().begin(), by_pointer.values().end(), by_tensor.values().begin()));

    const auto four = random_images(4, generator);
    CHECK_THROWS_WITH_AS(tensors.feed(four, random_labels(4, generator)),
                         "pipeline feed: 4 images and 4 labels; every micro-batch holds 3 of each.",
                         std::invalid_argument);
}

TEST_CASE("tensors: images as a tensor, labels as a vector, for the trainers and a pipeline")
{
    std::mt19937_64 generator(5);
    const auto images = random_images(3, generator);
    const auto label_tensor = random_labels(3, generator);
    const std::vector<std::int32_t> labels(label_tensor.begin(), label_tensor.end());
    exact_backprop<small_network, float> trainer(3);
    auto with_tensor = small_network::make_parameters<float>(6), with_vector = with_tensor;
    std::vector<float> tensor_gradient(small_network::parameter_count), vector_gradient(tensor_gradient.size());
    CHECK(trainer.accumulate_gradient(with_tensor, images, label_tensor, tensor_gradient) ==
          trainer.accumulate_gradient(with_vector, images, labels, vector_gradient));
    CHECK(tensor_gradient == vector_gradient);
    CHECK_THROWS_WITH_AS(
        trainer.accumulate_gradient(with_vector, images, std::vector<std::int32_t>{0, 1}, vector_gradient),
        "exact_backprop: labels: 2 labels for a batch of 3 images; one label each.", std::invalid_argument);
    constexpr auto cuts = partition<small_network, 2>();
    auto parameters = small_network::make_parameters<float>(7);
    sequential_pipeline<small_network, cuts, sgd<float>> pipeline(parameters, sgd_options{},
                                                                  [](std::size_t) { return 0.01; }, {.batch = 3});
    pipeline.feed(images, labels);
    CHECK(pipeline.drain().micro_batches == 1);
}
