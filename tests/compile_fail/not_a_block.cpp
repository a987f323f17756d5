// expected: Every element of a network after its input must be a block (a coupling, stem, downsample or head), not a layer.
// A layer given where a block belongs.
#include <petra/core.hpp>

using namespace petra;

using layer_in_place_of_block = network<input<1, 8, 8>, conv2d<1, 16>, classifier_head<16, 10>>;

int main() { return int(layer_in_place_of_block::parameter_count); }
