// The network scored on a dataset in inference mode (running statistics).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

#include <petra/petra.hpp>

namespace fashion {

// Examples per inference batch, wherever the network runs.
inline constexpr std::size_t evaluation_chunk = 250;

struct evaluation {
    double loss = 0;     // mean softmax cross-entropy over the examples
    double accuracy = 0; // the fraction classified right
};

template <class Net>
evaluation evaluate(const petra::network_parameters<Net, float>& parameters, const petra::labelled_images& data)
{
    using loss = typename petra::classification<Net>::loss;
    constexpr std::size_t chunk = evaluation_chunk;
    double loss_sum = 0;
    std::size_t correct = 0;
    for (std::size_t first = 0; first < data.size(); first += chunk) {
        const std::size_t count = std::min(chunk, data.size() - first);
        const auto images = xt::view(data.images, xt::range(first, first + count));
        const xt::xtensor<float, 2> logits = petra::predict(parameters, images);
        const std::int32_t* labels = data.labels.data() + first;
        loss_sum += double(loss::evaluate(count, logits.data(), labels, nullptr)) * double(count);
        correct += loss::correct(count, logits.data(), labels);
    }
    return {loss_sum / double(data.size()), double(correct) / double(data.size())};
}

} // namespace fashion
