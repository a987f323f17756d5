// Data parallelism over copies of a pipeline (floor 7): what every
// placement of D replicas computes alike, so that the simulator
// (sequential_pipeline) and MPI ranks (mpi/replicas.hpp) agree bit for bit.
//
// With options.replicas = D, a global micro-batch holds D x options.batch
// examples; replica d runs PETRA on its shard, examples
// [d x batch, (d + 1) x batch). Before each optimizer step, every stage's
// gradient sum is replaced by the sum over the D replicas, added in replica
// order ((g_0 + g_1) + g_2) + ..., and the step averages it over
// D x (micro-batches accumulated): every replica applies the same update to
// the same parameters, so the replicas never diverge. Batch-norm batch
// statistics are each replica's own (as data-parallel training does); the
// running statistics drift apart within an epoch and are averaged, in the
// same order, when an epoch ends (drain), so that an evaluation or a
// checkpoint between epochs sees one set.
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <string>

#include <petra/error.hpp>
#include <petra/pipeline/accumulation.hpp>
#include <petra/pipeline/options.hpp>

namespace petra {

// The replicas of options, refused unless at least 1.
inline std::size_t checked_replicas(const pipeline_options& options)
{
    if (options.replicas == 0) {
        raise_error(error_kind::invalid_argument, "pipeline: the replicas must be at least 1.");
    }
    return options.replicas;
}

// Examples in one global micro-batch: every replica's shard.
inline std::size_t global_batch(const pipeline_options& options) { return options.batch * options.replicas; }

// sum[i] = ((values_of(0)[i] + values_of(1)[i]) + ...) + values_of(replicas - 1)[i]:
// the one order every placement adds in. values_of(d) is a span of
// sum.size() values; values_of(0) may be sum itself, no other may.
template <class T, class ValuesOf>
void add_in_replica_order(std::size_t replicas, ValuesOf&& values_of, std::span<T> sum)
{
    const std::span<const T> first = values_of(std::size_t(0));
    if (first.data() != sum.data()) std::copy(first.begin(), first.end(), sum.begin());
    for (std::size_t d = 1; d < replicas; ++d) {
        const std::span<const T> values = values_of(d);
        for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += values[i];
    }
}

// The average over the replicas, summed as add_in_replica_order, divided by
// their count.
template <class T, class ValuesOf>
void average_in_replica_order(std::size_t replicas, ValuesOf&& values_of, std::span<T> average)
{
    add_in_replica_order(replicas, values_of, average);
    const T count = T(replicas);
    for (T& value : average) value /= count;
}

// The epoch's statistics of all replicas: each replica's added in replica
// order (its micro-batches are shards, each scored on its own).
template <class StatisticsOf>
epoch_statistics combine_replica_statistics(std::size_t replicas, StatisticsOf&& statistics_of)
{
    epoch_statistics all = statistics_of(std::size_t(0));
    for (std::size_t d = 1; d < replicas; ++d) {
        const epoch_statistics shard = statistics_of(d);
        all.micro_batches += shard.micro_batches;
        all.examples += shard.examples;
        all.correct += shard.correct;
        all.loss_sum += shard.loss_sum;
    }
    return all;
}

} // namespace petra
