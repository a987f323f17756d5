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

#include <petra/blocks/block.hpp>
#include <petra/kernels/simd.hpp>
#include <petra/network.hpp>
#include <petra/train/trainer_support.hpp>

namespace petra {

template <class Network, class T = float>
class exact_backprop {
    using task = classification<Network>;

public:
    // Memory for batches of up to max_batch examples, allocated once.
    explicit exact_backprop(std::size_t max_batch)
        : capacity_(max_batch), activations_(activation_offset(Network::block_count, max_batch)),
          workspaces_(workspace_offset(Network::block_count, max_batch)),
          gradients_(max_batch * Network::largest_activation)
    {
    }

    // One training step's gradient: forward with batch statistics (running
    // statistics updated once), loss, backward. Adds the gradient of the
    // batch's mean loss to gradient (laid out like the parameters) and returns
    // that mean loss. images: batch * Network::input::size values (NCHW);
    // labels: batch class indices. Throws std::invalid_argument for an empty
    // or too large batch, a gradient of the wrong length or a label out of
    // range.
    T accumulate_gradient(network_parameters<Network, T>& parameters, std::size_t batch, const T* images,
                          const std::int32_t* labels, std::span<T> gradient)
    {
        detail::check_step("exact_backprop", batch, capacity_, gradient.size(), Network::parameter_count, labels,
                           task::classes);
        batch_ = batch;
        T* values = parameters.values().data();
        T* state = parameters.state().data();
        Network::for_each_block([&](auto index) {
            constexpr std::size_t i = decltype(index)::value;
            Network::template block<i>::forward(pass::training, batch, values + Network::parameter_offsets[i],
                                                state + Network::state_offsets[i], input_of(i, images),
                                                output_of(i), workspace_of(i));
        });
        T* logits = output_of(Network::block_count - 1);
        T* grad_output = gradient_at(Network::block_count);
        const T loss = task::loss::evaluate(batch, static_cast<const T*>(logits), labels, grad_output);
        backward_from<Network::block_count>(values, state, images, gradient.data());
        return loss;
    }

    // The logits of the last batch (batch * classes values).
    std::span<const T> logits() const
    {
        return {activations_.data() + activation_offset(Network::block_count - 1, batch_),
                batch_ * task::classes};
    }

    // Bytes held for activations, workspaces and gradients between blocks.
    std::size_t memory_bytes() const
    {
        return (activations_.size() + workspaces_.size() + gradients_.size()) * sizeof(T);
    }

private:
    // Blocks Count - 1 down to 0, each from its stored input and workspace.
    template <std::size_t Count>
    void backward_from(const T* values, T* state, const T* images, T* gradient)
    {
        [&]<std::size_t... R>(std::index_sequence<R...>) {
            (backward_block<Count - 1 - R>(values, state, images, gradient), ...);
        }(std::make_index_sequence<Count>{});
    }

    template <std::size_t I>
    void backward_block(const T* values, T* state, const T* images, T* gradient)
    {
        using block = typename Network::template block<I>;
        // The images' gradient is not needed; skipped where the block allows.
        T* grad_input = I == 0 && input_gradient_optional<block>() ? nullptr : gradient_at(I);
        block::backward(batch_, values + Network::parameter_offsets[I], state + Network::state_offsets[I],
                        input_of(I, images), gradient_at(I + 1), grad_input, gradient + Network::parameter_offsets[I],
                        workspace_of(I));
    }

    // Block i's output sits at activation_offset(i); its input is the images
    // or block i - 1's output.
    static constexpr std::size_t activation_offset(std::size_t block, std::size_t batch)
    {
        std::size_t offset = 0;
        for (std::size_t i = 0; i < block; ++i) offset += batch * Network::profile[i].output_values;
        return offset;
    }
    static constexpr std::size_t workspace_offset(std::size_t block, std::size_t batch)
    {
        std::size_t offset = 0;
        for (std::size_t i = 0; i < block; ++i) offset += Network::workspace_size(i, batch);
        return offset;
    }
    const T* input_of(std::size_t block, const T* images) const
    {
        return block == 0 ? images : activations_.data() + activation_offset(block - 1, batch_);
    }
    T* output_of(std::size_t block) { return activations_.data() + activation_offset(block, batch_); }
    T* workspace_of(std::size_t block) { return workspaces_.data() + workspace_offset(block, batch_); }
    T* gradient_at(std::size_t boundary) { return gradients_.at(boundary); }

    std::size_t capacity_;
    std::size_t batch_ = 0;
    kernels::aligned_vector<T> activations_;
    kernels::aligned_vector<T> workspaces_;
    detail::alternating_buffers<T> gradients_;
};

} // namespace petra
