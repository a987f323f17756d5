// Reading a pipeline's numbers while it trains (floor 7): pause() on either
// driver returns a paused_pipeline, a guard that holds every stage between
// the same two ticks for as long as it lives.
//
//   {
//       const auto paused = pipeline.pause();   // every tick of the micro-batches fed is done
//       std::span<const float> values = paused.parameters();
//       std::span<const float> statistics = paused.state();
//       std::span<const float> sum = paused.gradient_sum(j);
//   }                                           // released: the next feed() goes on
//   pipeline.feed(images, labels);
//
// Contract:
// - While a guard lives, no stage runs: the spans it gives (and the
//   network_parameters the pipeline trains) do not change, and reading them
//   is race-free on the caller's thread, whichever the driver.
// - feed() and drain() refuse to run while a guard of their pipeline lives:
//   std::logic_error, thrown before anything is fed, so the pipeline stays
//   usable once the guard is gone. (Waiting would never end: the guard's
//   owner is the thread that feeds.) transfer_state() works under a guard.
// - Releasing a guard starts nothing: the stages run again when the next
//   feed() grants them a tick. Guards may nest; the pipeline is held until
//   the last is gone.
// - A guard belongs to the thread that feeds its pipeline and must not
//   outlive it. The spans are valid while the pipeline lives, their values
//   only while some guard does.
#pragma once

#include <array>
#include <cstddef>
#include <span>
#include <utility>

#include <petra/network.hpp>

namespace petra {

template <class Network, auto Cuts, class T>
class [[nodiscard]] paused_pipeline {
public:
    static constexpr std::size_t stage_count = Cuts.size() - 1;
    using gradient_sums = std::array<std::span<const T>, stage_count>;

    paused_pipeline(const paused_pipeline&) = delete;
    paused_pipeline& operator=(const paused_pipeline&) = delete;
    // A moved-from guard holds nothing.
    paused_pipeline(paused_pipeline&& other) noexcept
        : parameters_(other.parameters_), gradient_sums_(other.gradient_sums_),
          holders_(std::exchange(other.holders_, nullptr))
    {
    }
    paused_pipeline& operator=(paused_pipeline&&) = delete;

    ~paused_pipeline()
    {
        if (holders_ != nullptr) --*holders_;
    }

    // Every trained value of the network, block after block (as
    // network_parameters::values(); cut it with Network::parameters_of).
    std::span<const T> parameters() const { return parameters_.values(); }
    // The running statistics (as network_parameters::state()).
    std::span<const T> state() const { return parameters_.state(); }
    // Stage `stage`'s sum of the parameter gradients of the micro-batches
    // it has differentiated since its last optimizer step: its slice of the
    // parameters' layout, from Network::parameter_offsets[Cuts[stage]].
    std::span<const T> gradient_sum(std::size_t stage) const { return gradient_sums_.at(stage); }

private:
    template <class, auto, class, class>
    friend class pipeline_core;

    // Only a pipeline makes one, with every stage between ticks; `holders`
    // is its count of guards alive.
    paused_pipeline(network_parameters_view<Network, const T> parameters, const gradient_sums& sums,
                    std::size_t& holders) noexcept
        : parameters_(parameters), gradient_sums_(sums), holders_(&holders)
    {
        ++holders;
    }

    network_parameters_view<Network, const T> parameters_;
    gradient_sums gradient_sums_;
    std::size_t* holders_;
};

} // namespace petra
