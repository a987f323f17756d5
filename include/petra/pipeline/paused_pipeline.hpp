// Reading a pipeline's numbers while it trains (floor 7): pause() on a
// pipeline returns a guard that holds every stage it runs between the same
// two ticks for as long as it lives: a paused_pipeline from the simulator
// and from threads (the whole network's parameters are the caller's), a
// paused_stages from an MPI rank (the stages it hosts, each on its own).
//
//   {
//       const auto paused = pipeline.pause();   // every tick of the micro-batches fed is done
//       std::span<const float> values = paused.parameters();
//       std::span<const float> statistics = paused.state();
//       std::span<const float> sum = paused.gradient_sum(j);
//       std::span<const float> own = paused.stage_parameters(j);  // either guard
//   }                                           // released: the next feed() goes on
//   pipeline.feed(images, labels);
//
// Contract:
// - While a guard lives, no stage runs: the spans it gives (and the
//   network_parameters the pipeline trains) do not change, and reading them
//   is race-free on the caller's thread, whichever the driver. On an MPI
//   rank, pause() waits for that rank's stages alone: it is not collective.
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
#include <string>
#include <utility>

#include <petra/error.hpp>
#include <petra/network.hpp>

namespace petra {

class pause_gate;

// What every guard gives: each stage's slice of the parameters (from
// Network::parameter_offsets[Cuts[stage]]), of the running statistics (from
// Network::state_offsets[Cuts[stage]]), and its sum of the parameter
// gradients of the micro-batches it has differentiated since its last
// optimizer step (the parameters' layout). All three are empty for a stage
// run elsewhere (on another MPI rank).
template <class Network, auto Cuts, class T>
class [[nodiscard]] paused_stages {
public:
    static constexpr std::size_t stage_count = Cuts.size() - 1;
    using stage_spans = std::array<std::span<const T>, stage_count>;
    using gradient_sums = stage_spans;

    paused_stages(const paused_stages&) = delete;
    paused_stages& operator=(const paused_stages&) = delete;
    // A moved-from guard holds nothing.
    paused_stages(paused_stages&& other) noexcept
        : parameters_(other.parameters_), state_(other.state_), gradient_sums_(other.gradient_sums_),
          holders_(std::exchange(other.holders_, nullptr))
    {}
    paused_stages& operator=(paused_stages&&) = delete;

    ~paused_stages()
    {
        if (holders_ != nullptr) --*holders_;
    }

    std::span<const T> stage_parameters(std::size_t stage) const { return parameters_.at(stage); }
    std::span<const T> stage_state(std::size_t stage) const { return state_.at(stage); }
    std::span<const T> gradient_sum(std::size_t stage) const { return gradient_sums_.at(stage); }

protected:
    friend class pause_gate;

    // Only a pipeline makes one (through its pause_gate), with every stage
    // between ticks; `holders` is its count of guards alive.
    paused_stages(const stage_spans& parameters, const stage_spans& state, const gradient_sums& sums,
                  std::size_t& holders) noexcept
        : parameters_(parameters), state_(state), gradient_sums_(sums), holders_(&holders)
    {
        ++holders;
    }

private:
    stage_spans parameters_;
    stage_spans state_;
    gradient_sums gradient_sums_;
    std::size_t* holders_;
};

// The guard of a pipeline whose parameters are one network_parameters (the
// simulator's, the threads'): the whole network's, too.
template <class Network, auto Cuts, class T>
class [[nodiscard]] paused_pipeline : public paused_stages<Network, Cuts, T> {
    using base = paused_stages<Network, Cuts, T>;

public:
    paused_pipeline(paused_pipeline&&) noexcept = default;

    // Every trained value of the network, block after block (as
    // network_parameters::values(); cut it with Network::parameters_of).
    std::span<const T> parameters() const { return parameters_.values(); }
    // The running statistics (as network_parameters::state()).
    std::span<const T> state() const { return parameters_.state(); }

private:
    friend class pause_gate;

    paused_pipeline(network_parameters_view<Network, const T> parameters, const typename base::gradient_sums& sums,
                    std::size_t& holders) noexcept
        : base(slices(parameters.values(), Network::parameter_offsets),
               slices(parameters.state(), Network::state_offsets), sums, holders),
          parameters_(parameters)
    {}

    // Each stage's slice of a whole network's values, cut at `offsets`
    // (one per block, and the end).
    template <class Offsets>
    static typename base::stage_spans slices(std::span<const T> whole, const Offsets& offsets) noexcept
    {
        typename base::stage_spans stages;
        for (std::size_t j = 0; j < base::stage_count; ++j) {
            stages[j] = whole.subspan(offsets[Cuts[j]], offsets[Cuts[j + 1]] - offsets[Cuts[j]]);
        }
        return stages;
    }

    network_parameters_view<Network, const T> parameters_;
};

// A pipeline's count of guards alive, which feed() and drain() consult;
// only the caller's thread touches it.
class pause_gate {
public:
    pause_gate() = default;
    pause_gate(const pause_gate&) = delete;
    pause_gate& operator=(const pause_gate&) = delete;

    // A guard over the whole network's parameters and the stages' gradient
    // sums. The driver has brought every stage to rest between the same two
    // ticks.
    template <class Network, auto Cuts, class T>
    paused_pipeline<Network, Cuts, T> hold(network_parameters_view<Network, const T> parameters,
                                           const typename paused_pipeline<Network, Cuts, T>::gradient_sums& sums)
    {
        return paused_pipeline<Network, Cuts, T>(parameters, sums, held_);
    }
    // The same over the stages' own slices (empty for stages run elsewhere).
    template <class Network, auto Cuts, class T>
    paused_stages<Network, Cuts, T> hold_stages(const typename paused_stages<Network, Cuts, T>::stage_spans& parameters,
                                                const typename paused_stages<Network, Cuts, T>::stage_spans& state,
                                                const typename paused_stages<Network, Cuts, T>::gradient_sums& sums)
    {
        return paused_stages<Network, Cuts, T>(parameters, state, sums, held_);
    }

    // Called first by feed() and drain(): while a guard lives, no stage may
    // run.
    void refuse_while_paused(const char* operation) const
    {
        if (held_ != 0) {
            raise_error(error_kind::logic_error,
                        std::string("pipeline: ") + operation +
                            " while the pipeline is paused; let the paused_pipeline that pause() returned "
                            "go out of scope first.");
        }
    }

private:
    std::size_t held_ = 0;
};

} // namespace petra
