// Exact backprop, the classical algorithm and the baseline PETRA is judged
// against: a forward through every block that keeps every activation and
// every block's workspace, the loss, then every block's backward from what
// its forward left. Nothing is recomputed, nothing reconstructed; the memory
// grows with the depth of the network (memory_bytes()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <petra/batch_view.hpp>
#include <petra/blocks/block.hpp>
#include <petra/boundary_layout.hpp>
#include <petra/kernels/simd.hpp>
#include <petra/network.hpp>
#include <petra/tensor_batch.hpp>
#include <petra/train/trainer_support.hpp>

namespace petra {

template <class Network, class T = float>
class exact_backprop : public detail::gradient_forms<exact_backprop<Network, T>, Network, T> {
    using task = classification<Network>;
    using forms = detail::gradient_forms<exact_backprop<Network, T>, Network, T>;

public:
    static constexpr const char* name = "exact_backprop";
    // The other forms: tensors, and pointers with a batch size.
    using forms::accumulate_gradient;

    // Memory for batches of up to max_batch examples, allocated once.
    explicit exact_backprop(std::size_t max_batch)
        : capacity_(max_batch), activations_(max_batch * activation_layout.size),
          workspaces_(workspace_offset(Network::block_count, max_batch)), gradients_(max_batch * gradient_layout.size)
    {}

    // One training step's gradient: forward with batch statistics (running
    // statistics updated once), loss, backward. Adds the gradient of the
    // batch's mean loss to gradient (laid out like the parameters) and returns
    // that mean loss. labels: one class index per image. Throws
    // std::invalid_argument for an empty or too large batch, as many labels
    // as images, a gradient of the wrong length or a label out of range.
    T accumulate_gradient(network_parameters_view<Network, T> parameters,
                          const_batch<T, typename Network::input> images, std::span<const std::int32_t> labels,
                          std::span<T> gradient)
    {
        detail::check_step(name, images.batch(), capacity_, gradient.size(), Network::parameter_count, labels,
                           task::classes);
        batch_ = images.batch();
        Network::for_each_block([&](auto i) {
            Network::template block<i>::forward(pass::training, parameters.template block_values<i>(),
                                                parameters.template block_state<i>(), input_of<i>(images),
                                                output_of<i>(), workspace_of(i));
        });
        const T* logits = output_of<Network::block_count - 1>().data();
        const T loss = task::loss::evaluate(batch_, logits, labels.data(), gradient_at<Network::block_count>().data());
        Network::for_each_block_down([&](auto i) { backward_block<i>(parameters, images, gradient); });
        return loss;
    }

    // The logits of the last batch (batch * classes values).
    std::span<const T> logits() const
    {
        return {activations_.data() + activation_layout.offset[Network::block_count - 1] * batch_,
                batch_ * task::classes};
    }

    // Bytes held for activations, workspaces and gradients between blocks.
    std::size_t memory_bytes() const
    {
        return (activations_.size() + workspaces_.size() + gradients_.size()) * sizeof(T);
    }

private:
    // Block I, from its stored input and workspace.
    template <std::size_t I>
    void backward_block(network_parameters_view<Network, const T> parameters,
                        batch_view<const T, typename Network::input> images, std::span<T> gradient)
    {
        using block = typename Network::template block<I>;
        // The images' gradient is not needed; skipped where the block allows.
        const auto grad_x = [&] {
            if constexpr (I == 0 && input_gradient_optional<block>()) return batch_view<T, typename block::input>{};
            else return gradient_at<I>();
        }();
        block::backward(parameters.template block_values<I>(), input_of<I>(images), gradient_at<I + 1>(), grad_x,
                        Network::template parameters_of<I>(gradient), workspace_of(I));
    }

    // Block i's output sits at activation_layout.offset[i] (per example); its
    // input is the images or block i - 1's output. Every output is kept; a
    // block that passes its input's first half through (an additive
    // coupling) finds it in place: its output begins half an activation
    // below its input (boundary_layout.hpp).
    static constexpr auto activation_layout = detail::lay_out_block_boundaries<Network, 1, Network::block_count>(
        detail::half_order::later_below, detail::boundary_placement::every_boundary_kept);
    // The gradient at boundary b (block b's input, or the logits for b =
    // block_count) sits at gradient_layout.offset[b]; only a boundary and the
    // next are live together, and a block that passes its output gradient's
    // first half through finds it in place.
    static constexpr auto gradient_layout = detail::lay_out_block_boundaries<Network, 0, Network::block_count + 1>(
        detail::half_order::later_above, detail::boundary_placement::neighbours_apart);
    static constexpr std::size_t workspace_offset(std::size_t block, std::size_t batch)
    {
        std::size_t offset = 0;
        for (std::size_t i = 0; i < block; ++i) offset += Network::workspace_size(i, batch);
        return offset;
    }
    template <std::size_t I>
    batch_view<T, boundary_shape_t<Network, I + 1>> output_of()
    {
        return {activations_.data() + activation_layout.offset[I] * batch_, batch_};
    }
    template <std::size_t I>
    batch_view<const T, boundary_shape_t<Network, I>> input_of(batch_view<const T, typename Network::input> images)
    {
        if constexpr (I == 0) return images;
        else return output_of<I - 1>();
    }
    std::span<T> workspace_of(std::size_t block)
    {
        return {workspaces_.data() + workspace_offset(block, batch_), Network::workspace_size(block, batch_)};
    }
    template <std::size_t Boundary>
    batch_view<T, boundary_shape_t<Network, Boundary>> gradient_at()
    {
        return {gradients_.data() + gradient_layout.offset[Boundary] * batch_, batch_};
    }

    std::size_t capacity_;
    std::size_t batch_ = 0;
    kernels::aligned_vector<T> activations_;
    kernels::aligned_vector<T> workspaces_;
    kernels::aligned_vector<T> gradients_;
};

} // namespace petra
