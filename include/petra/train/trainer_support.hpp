// What the trainers share: a network trained on class labels ends with one
// logit per class and is scored by the softmax cross-entropy loss; the
// arguments of a training step are checked the same way by every trainer;
// activations and gradients passed between blocks alternate between two
// buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include <petra/batch_view.hpp>
#include <petra/error.hpp>
#include <petra/layers/softmax_cross_entropy_loss.hpp>
#include <petra/network.hpp>
#include <petra/shape.hpp>
#include <petra/tensor_batch.hpp>

namespace petra {

// The shape at a boundary between blocks: the network's input at boundary 0,
// block b - 1's output (block b's input) at boundary b.
template <class Network, std::size_t Boundary>
struct boundary_shape {
    using type = typename Network::template block<Boundary - 1>::output;
};
template <class Network>
struct boundary_shape<Network, 0> {
    using type = typename Network::input;
};
template <class Network, std::size_t Boundary>
using boundary_shape_t = typename boundary_shape<Network, Boundary>::type;

template <class Network>
struct classification {
    static_assert(is_network<Network>::value, "A trainer needs a network<input<C, H, W>, Block...>.");
    static_assert(a_shape<typename Network::output>,
                  "A network trained on class labels must end with a block that gives one logit per class, "
                  "such as classifier_head.");
    static constexpr std::size_t classes = Network::output::size;
    using loss = layer_for<softmax_cross_entropy_loss<classes>, shape<classes>>;
};

namespace detail {

// Throws std::invalid_argument, naming the trainer, for a batch it cannot
// take, a gradient array of the wrong length or a label outside [0,
// classes), before anything is computed (so that running statistics are not
// moved by a step that fails).
inline void check_step(const char* trainer, std::size_t batch, std::size_t capacity, std::size_t gradient_size,
                       std::size_t parameter_count, std::span<const std::int32_t> labels, std::size_t classes)
{
    if (labels.size() != batch) {
        raise_error(error_kind::invalid_argument, std::string(trainer) + ": " + std::to_string(labels.size()) +
                                                      " labels for " + std::to_string(batch) + " images.");
    }
    if (batch == 0 || batch > capacity) {
        raise_error(error_kind::invalid_argument, std::string(trainer) + ": batch of " + std::to_string(batch) +
                                                      " examples; this trainer takes 1 to " + std::to_string(capacity) +
                                                      ".");
    }
    if (gradient_size != parameter_count) {
        raise_error(error_kind::invalid_argument, std::string(trainer) + ": the gradient has " +
                                                      std::to_string(gradient_size) + " values; the network has " +
                                                      std::to_string(parameter_count) + " parameters.");
    }
    for (std::size_t n = 0; n < batch; ++n) {
        if (labels[n] < 0 || std::size_t(labels[n]) >= classes) {
            raise_error(error_kind::invalid_argument, std::string(trainer) + ": label " + std::to_string(labels[n]) +
                                                          " of example " + std::to_string(n) + " is outside [0, " +
                                                          std::to_string(classes) + ").");
        }
    }
}

// The forms of accumulate_gradient a trainer offers beside its own on a
// view of images and a span of labels: tensors (tensor_batch.hpp: images N x
// C x H x W, labels N or any range of them), checked against the network's
// input, and pointers with a batch size. A trainer derives from
// gradient_forms<itself, Network, T>, names itself (static constexpr const
// char* name, for the messages) and says `using gradient_forms<...>::
// accumulate_gradient;`.
template <class Trainer, class Network, class T>
class gradient_forms {
public:
    template <tensor_like Images, label_source Labels>
    T accumulate_gradient(network_parameters_view<Network, T> parameters, const Images& images, const Labels& labels,
                          std::span<T> gradient)
    {
        const batch_view<const T, typename Network::input> x =
            as_batch<typename Network::input>(images, std::string(Trainer::name) + ": images");
        return trainer().accumulate_gradient(
            parameters, x, as_labels(labels, x.batch(), std::string(Trainer::name) + ": labels"), gradient);
    }

    // images: batch * Network::input::size values (NCHW); labels: batch
    // class indices.
    T accumulate_gradient(network_parameters_view<Network, T> parameters, std::size_t batch, const T* images,
                          const std::int32_t* labels, std::span<T> gradient)
    {
        return trainer().accumulate_gradient(parameters, const_batch<T, typename Network::input>(images, batch),
                                             std::span<const std::int32_t>(labels, batch), gradient);
    }

private:
    Trainer& trainer() { return static_cast<Trainer&>(*this); }
};

} // namespace detail

} // namespace petra
