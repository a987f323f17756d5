// expected: A block cannot take the output of the block before it: their shapes do not match.
// The stem gives halves of 8 channels; the coupling's F expects 4.
#include <petra/core.hpp>

using namespace petra;

using mismatched = network<input<1, 8, 8>, stem<chain<conv2d<1, 16>, batch_norm<16>, relu>>,
                           additive_coupling<residual_function<4>>, classifier_head<16, 10>>;

int main() { return int(mismatched::parameter_count); }
