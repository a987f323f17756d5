// The softmax cross-entropy loss over Classes logits per example: the mean
// over the batch of -log softmax(logits)[label], and its gradient with respect
// to the logits. It ends a network: it takes labels and returns a number, so it
// is not a layer in the sense of layer.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <petra/kernels/softmax.hpp>
#include <petra/shape.hpp>

namespace petra {

template <std::size_t Classes>
struct softmax_cross_entropy_loss {
    static_assert(Classes > 0, "softmax_cross_entropy_loss needs at least one class.");

    template <class Input>
    struct bind {
        static_assert(Input::size == Classes,
                      "softmax_cross_entropy_loss: the input does not have one value per class.");
        using input = Input;
        static constexpr std::size_t forward_flops = 4 * Classes;
        static constexpr std::size_t backward_flops = 2 * Classes;

        // Returns the mean loss of the batch; writes the gradient of that mean
        // with respect to the logits to grad_logits and the class
        // probabilities to probabilities, each when not null. Throws
        // std::invalid_argument for a label outside [0, Classes).
        template <class T>
        static T evaluate(std::size_t batch, const T* logits, const std::int32_t* labels,
                          std::type_identity_t<T>* grad_logits, std::type_identity_t<T>* probabilities = nullptr)
        {
            return kernels::softmax_cross_entropy<T>({.rows = batch,
                                                      .classes = Classes,
                                                      .logits = logits,
                                                      .ld_logits = Classes,
                                                      .labels = labels,
                                                      .probabilities = probabilities,
                                                      .grad_logits = grad_logits,
                                                      .ld_out = Classes});
        }

        // How many of the batch's examples have their label as the largest
        // logit (the first largest, on ties).
        template <class T>
        static std::size_t correct(std::size_t batch, const T* logits, const std::int32_t* labels)
        {
            std::size_t count = 0;
            for (std::size_t n = 0; n < batch; ++n) {
                const T* row = logits + n * Classes;
                std::size_t best = 0;
                for (std::size_t c = 1; c < Classes; ++c) {
                    if (row[c] > row[best]) best = c;
                }
                count += std::int32_t(best) == labels[n];
            }
            return count;
        }
    };
};

} // namespace petra
