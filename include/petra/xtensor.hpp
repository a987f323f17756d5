// What petra gives back as xtensor containers (the floors below take any
// tensor, see tensor_batch.hpp, and need no tensor library; this header
// includes xtensor).
//
//   xt::xtensor<float, 4> images = ...;              // N x 1 x 28 x 28
//   xt::xtensor<float, 2> logits = predict(parameters, images);   // N x 10
#pragma once

#include <cstddef>

#include <xtensor/xtensor.hpp>

#include <petra/network.hpp>
#include <petra/tensor_batch.hpp>

namespace petra {

// Inference on a tensor of images (N x C x H x W): the logits, N x classes.
// parameters: a network_parameters or a network_parameters_view.
template <network_parameters_like Parameters, tensor_like Images>
xt::xtensor<typename Parameters::value_type, 2> predict(const Parameters& parameters, const Images& images)
{
    using Network = typename Parameters::network_type;
    using T = typename Parameters::value_type;
    const batch_view<const T, typename Network::input> x = as_batch<typename Network::input>(images, "predict: images");
    xt::xtensor<T, 2> logits = xt::xtensor<T, 2>::from_shape({x.batch(), Network::output::size});
    predict(parameters, x, batch_view<T, typename Network::output>(logits.data(), x.batch()));
    return logits;
}

} // namespace petra
