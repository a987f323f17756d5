// expected: A pipeline cannot have more stages than the network has blocks.
// Three blocks cannot make four stages.
#include <petra/core.hpp>
#include <petra/partition.hpp>

using namespace petra;

using three_blocks = network<input<1, 8, 8>, stem<chain<conv2d<1, 16>, batch_norm<16>, relu>>,
                             additive_coupling<residual_function<8>>, classifier_head<16, 10>>;

constexpr auto cuts = partition<three_blocks, 4>();

int main() { return int(cuts[1]); }
