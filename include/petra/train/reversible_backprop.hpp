// Reversible backprop: the exact gradient without stored activations. The
// forward keeps only the inputs of the blocks that are not reversible (stem,
// downsampling, head) and the logits. The backward walks down the blocks: a
// reversible block reconstructs its input from its output with the same
// parameters and differentiates (reconstruct_backward, its function evaluated
// once); a block that is not reversible recomputes from its stored input
// (recompute_backward), which also restarts the reconstruction below it from
// exact values. This is how PETRA's stages before the last differentiate
// (its last stage keeps its activations instead): the gradients equal exact
// backprop's up to the rounding of the reconstructions.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

#include <petra/batch_view.hpp>
#include <petra/blocks/block.hpp>
#include <petra/boundary_layout.hpp>
#include <petra/kernels/simd.hpp>
#include <petra/network.hpp>
#include <petra/tensor_batch.hpp>
#include <petra/train/trainer_support.hpp>

namespace petra {

template <class Network, class T = float>
class reversible_backprop : public detail::gradient_forms<reversible_backprop<Network, T>, Network, T> {
    using task = classification<Network>;
    using forms = detail::gradient_forms<reversible_backprop<Network, T>, Network, T>;

public:
    static constexpr const char* name = "reversible_backprop";
    // The other forms: tensors, and pointers with a batch size.
    using forms::accumulate_gradient;

    // Memory for batches of up to max_batch examples, allocated once.
    explicit reversible_backprop(std::size_t max_batch)
        : capacity_(max_batch), stored_(stored_offset(Network::block_count + 1, max_batch)),
          passing_(max_batch * passing_layout.size), gradients_(max_batch * gradient_layout.size),
          recomputed_(max_batch * recomputed_values), workspace_(Network::largest_workspace(max_batch))
    {}

    // As exact_backprop::accumulate_gradient: forward with batch statistics
    // (running statistics updated once; reconstructions never update them),
    // loss, backward; adds the gradient of the batch's mean loss to gradient
    // and returns that mean loss.
    T accumulate_gradient(network_parameters_view<Network, T> parameters,
                          const_batch<T, typename Network::input> images, std::span<const std::int32_t> labels,
                          std::span<T> gradient)
    {
        detail::check_step(name, images.batch(), capacity_, gradient.size(), Network::parameter_count, labels,
                           task::classes);
        batch_ = images.batch();
        const std::span<T> workspace(workspace_);
        Network::for_each_block([&](auto index) {
            constexpr std::size_t i = decltype(index)::value;
            const auto x = [&] {
                if constexpr (i == 0) return images;
                else return batch_view<const T, boundary_shape_t<Network, i>>(activation_at<i>());
            }();
            Network::template block<i>::forward(pass::training, parameters.template block_values<i>(),
                                                parameters.template block_state<i>(), x, activation_at<i + 1>(),
                                                workspace);
        });
        const T loss = task::loss::evaluate(batch_, activation_at<Network::block_count>().data(), labels.data(),
                                            gradient_at<Network::block_count>().data());
        Network::for_each_block_down([&](auto i) { backward_block<i>(parameters, images, gradient); });
        return loss;
    }

    std::span<const T> logits() const
    {
        return {stored_.data() + stored_offset(Network::block_count, batch_), batch_ * task::classes};
    }

    // Bytes held for stored inputs, the activations passed between blocks,
    // gradients and scratch.
    std::size_t memory_bytes() const
    {
        return (stored_.size() + passing_.size() + gradients_.size() + recomputed_.size() + workspace_.size()) *
               sizeof(T);
    }

private:
    template <std::size_t I>
    void backward_block(network_parameters_view<Network, const T> parameters,
                        batch_view<const T, typename Network::input> images, std::span<T> gradient)
    {
        using block = typename Network::template block<I>;
        const auto grad_parameters = Network::template parameters_of<I>(gradient);
        const std::span<T> workspace(workspace_);
        if constexpr (block::reversible) {
            // Block I's output is block I + 1's input: stored, or just
            // reconstructed by block I + 1. Its input is not stored (for
            // block 0, the images are not overwritten: boundary 0 is a
            // passing buffer).
            reconstruct_backward<block>(parameters.template block_values<I>(), parameters.template block_state<I>(),
                                        activation_at<I + 1>(), gradient_at<I + 1>(), activation_at<I>(),
                                        gradient_at<I>(), grad_parameters, workspace);
        } else {
            const auto x = [&] {
                if constexpr (I == 0) return images;
                else return batch_view<const T, typename block::input>(activation_at<I>());
            }();
            // The images' gradient is not needed; skipped where the block allows.
            const auto grad_x = [&] {
                if constexpr (I == 0 && input_gradient_optional<block>()) return batch_view<T, typename block::input>{};
                else return gradient_at<I>();
            }();
            recompute_backward<block>(parameters.template block_values<I>(), parameters.template block_state<I>(), x,
                                      gradient_at<I + 1>(), grad_x, grad_parameters, workspace,
                                      batch_view<T, typename block::output>(recomputed_.data(), batch_));
        }
    }

    // Boundary b is block b's input and block b - 1's output. Stored
    // boundaries: the input of every block that is not reversible (except
    // the images, which the caller holds) and the logits (boundary
    // block_count). The others pass through one buffer, placed by
    // passing_layout (boundary_layout.hpp; a stored boundary takes no room
    // there): a block's input and output apart, except that a coupling's
    // output begins half an activation below its input, as its inverse's
    // rebuilt input lies half an activation above its output, so that it
    // copies no half. The gradients likewise (gradient_layout), the input
    // gradient half an activation below the output gradient.
    static constexpr bool stored_boundary(std::size_t boundary)
    {
        return boundary == Network::block_count || (boundary > 0 && !Network::profile[boundary].reversible);
    }
    static constexpr std::size_t boundary_values(std::size_t boundary)
    {
        return boundary == 0 ? Network::input::size : Network::profile[boundary - 1].output_values;
    }
    static constexpr std::size_t stored_offset(std::size_t boundary, std::size_t batch)
    {
        std::size_t offset = 0;
        for (std::size_t b = 0; b < boundary; ++b) {
            if (stored_boundary(b)) offset += batch * boundary_values(b);
        }
        return offset;
    }
    static constexpr auto passing_layout = detail::lay_out_block_boundaries<Network, 0, Network::block_count + 1>(
        detail::half_order::later_below, detail::boundary_placement::neighbours_apart,
        [](std::size_t b) { return !stored_boundary(b); });
    static constexpr auto gradient_layout = detail::lay_out_block_boundaries<Network, 0, Network::block_count + 1>(
        detail::half_order::later_above, detail::boundary_placement::neighbours_apart);

    template <std::size_t Boundary>
    batch_view<T, boundary_shape_t<Network, Boundary>> activation_at()
    {
        if constexpr (stored_boundary(Boundary)) return {stored_.data() + stored_offset(Boundary, batch_), batch_};
        else return {passing_.data() + passing_layout.offset[Boundary] * batch_, batch_};
    }
    template <std::size_t Boundary>
    batch_view<T, boundary_shape_t<Network, Boundary>> gradient_at()
    {
        return {gradients_.data() + gradient_layout.offset[Boundary] * batch_, batch_};
    }

    // Values per example of the output a recomputation may write
    // (recomputation_writes_output, layers/layer.hpp): the largest of the
    // blocks it recomputes that may; none for the reference network.
    static constexpr std::size_t recomputed_values = [] {
        std::size_t values = 0;
        for (const block_profile& block : Network::profile) {
            if (!block.reversible && block.recomputation_writes_output) values = std::max(values, block.output_values);
        }
        return values;
    }();

    std::size_t capacity_;
    std::size_t batch_ = 0;
    kernels::aligned_vector<T> stored_;
    kernels::aligned_vector<T> passing_;
    kernels::aligned_vector<T> gradients_;
    kernels::aligned_vector<T> recomputed_;
    kernels::aligned_vector<T> workspace_;
};

} // namespace petra
