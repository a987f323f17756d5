// The reference network's cuts into 2 to 4 stages under the built-in cost
// model and under the cuts the project's targets use (measured costs after
// scripts/calibrate), with each stage's share of the model's costs.
#include <array>
#include <cstddef>
#include <cstdio>

#include <petra/petra.hpp>

namespace {

template <std::size_t Points>
void print(const char* what, const std::array<std::size_t, Points>& cuts)
{
    constexpr std::size_t Stages = Points - 1;
    std::printf("| %zu | %s |", Stages, what);
    for (std::size_t s = 0; s < Stages; ++s) std::printf(" %zu-%zu", cuts[s], cuts[s + 1] - 1);
    std::printf(" |\n");
}

} // namespace

int main()
{
    using net = petra::reference_network<>;
    std::printf("| stages | costs | blocks per stage |\n|---:|---|---|\n");
    print("model", petra::partition<net, 2>());
    print(petra::reference_cuts_measured ? "measured" : "model (no calibration)", petra::reference_cuts<2>());
    print("model", petra::partition<net, 3>());
    print(petra::reference_cuts_measured ? "measured" : "model (no calibration)", petra::reference_cuts<3>());
    print("model", petra::partition<net, 4>());
    print(petra::reference_cuts_measured ? "measured" : "model (no calibration)", petra::reference_cuts<4>());
    return 0;
}
