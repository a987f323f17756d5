// The links between a pipeline's stages (floor 7), wherever the stages
// run: which channels there are, their sizes and names, how a stage's
// worker is wired to them, and the feeder's side. Every placement (the
// simulator, threads, MPI ranks) builds its transports from this one plan,
// so that the schedule's channels are the same in all of them.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include <petra/network.hpp>
#include <petra/pipeline/channel.hpp>

namespace petra {

// One channel of the plan: its name, the stage whose place sends on it (the
// feeder's is stage 0's), the stage that receives, and its size.
struct link_plan {
    std::string name;
    std::size_t sender;
    std::size_t receiver;
    std::size_t capacity;       // messages
    std::size_t message_values; // values per message
};

template <class Network, auto Cuts, class T>
struct pipeline_layout {
    static constexpr std::size_t stage_count = Cuts.size() - 1;

    // The channels' sizes for a micro-batch size, in messages and bytes:
    // the one into stage j (its input), the one from stage j + 1 into stage
    // j (the input stage j + 1 rebuilt, and its gradient), the labels'.
    // Forward: at tick t stage j may send its tick-t activation before
    // stage j + 1 has taken the tick t - 1 one (the simulator runs stage j
    // first). Backward: one message would do for the schedule, but a stage
    // computes straight into its outgoing slot and its neighbour reads
    // straight from it, so with one slot the sender's backward would wait
    // for the receiver's whole backward (measured: 467 against 652
    // examples/s for the reference network in 2 stages). The labels run
    // J - 1 ticks ahead of the last stage.
    static constexpr std::size_t channel_capacity = 2;
    static constexpr std::size_t labels_capacity = 2 * stage_count + 2;
    static constexpr std::size_t forward_message_values(std::size_t j, std::size_t batch)
    {
        return batch * Network::profile[Cuts[j]].input_values;
    }
    static constexpr std::size_t backward_message_values(std::size_t j, std::size_t batch)
    {
        return 2 * batch * Network::profile[Cuts[j + 1]].input_values;
    }
    static constexpr std::size_t forward_channel_bytes(std::size_t j, std::size_t batch)
    {
        return channel_capacity * (forward_message_values(j, batch) * sizeof(T) + sizeof(message_header));
    }
    static constexpr std::size_t backward_channel_bytes(std::size_t j, std::size_t batch)
    {
        return channel_capacity * (backward_message_values(j, batch) * sizeof(T) + sizeof(message_header));
    }
    static constexpr std::size_t labels_channel_bytes(std::size_t batch)
    {
        return labels_capacity * (batch * sizeof(std::int32_t) + sizeof(message_header));
    }

    // The plan of each channel: into stage j, from stage j + 1 into stage j
    // (j + 1 < J), the labels.
    static link_plan forward_link(std::size_t j, std::size_t batch)
    {
        return {"forward into stage " + std::to_string(j), j == 0 ? 0 : j - 1, j, channel_capacity,
                forward_message_values(j, batch)};
    }
    static link_plan backward_link(std::size_t j, std::size_t batch)
    {
        return {"backward into stage " + std::to_string(j), j + 1, j, channel_capacity,
                backward_message_values(j, batch)};
    }
    static link_plan labels_link(std::size_t batch) { return {"labels", 0, stage_count - 1, labels_capacity, batch}; }
};

// Every channel of a pipeline of J stages numbered once (forward ones,
// backward ones, the labels'): how the counts of messages sent that a
// checkpoint across processes needs are indexed.
constexpr std::size_t link_count(std::size_t stage_count) { return 2 * stage_count + 1; }
constexpr std::size_t forward_link_index(std::size_t j) { return j; }
constexpr std::size_t backward_link_index(std::size_t stage_count, std::size_t j) { return stage_count + j; }
constexpr std::size_t labels_link_index(std::size_t stage_count) { return 2 * stage_count; }

// Stage I's links (stage_worker::links) to the transports of a placement:
// forward[j] into stage j, backward[j] from stage j + 1 into stage j, and
// the labels, each held by a pointer-like.
template <class Links, std::size_t I, std::size_t StageCount, class Forward, class Backward, class Labels>
Links stage_links(const Forward& forward, const Backward& backward, Labels* labels)
{
    Links connections;
    connections.forward_in = &*forward[I];
    if constexpr (I + 1 < StageCount) {
        connections.forward_out = &*forward[I + 1];
        connections.backward_in = &*backward[I];
    } else {
        connections.labels = labels;
    }
    if constexpr (I > 0) connections.backward_out = &*backward[I - 1];
    return connections;
}

// The feeder's side: micro-batch `index`, whose counts the driver has
// checked (detail::check_micro_batch), into stage 0 and to the labels.
template <class T, class Images, class Transport, class LabelTransport>
void send_micro_batch(Transport& forward, LabelTransport& labels_out, const Images& images,
                      std::span<const std::int32_t> labels, std::size_t index)
{
    message<T> in = forward.begin_send();
    std::copy(images.begin(), images.end(), in.values);
    *in.header = {index, false};
    forward.end_send();
    message<std::int32_t> out = labels_out.begin_send();
    std::copy(labels.begin(), labels.end(), out.values);
    *out.header = {index, false};
    labels_out.end_send();
}

// The end of the epoch, after `fed` micro-batches.
template <class T, class Transport>
void send_end_of_epoch(Transport& forward, std::size_t fed)
{
    message<T> in = forward.begin_send();
    *in.header = {fed, true};
    forward.end_send();
}

} // namespace petra
