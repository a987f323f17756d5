// expected: additive_coupling: F must give an output of the same shape as its input.
// F doubles the channels, so y = x~ + F(x) is not defined.
#include <petra/core.hpp>

using namespace petra;

using widening = network<input<1, 8, 8>, stem<chain<conv2d<1, 16>, batch_norm<16>, relu>>,
                         additive_coupling<chain<conv2d<8, 16>, batch_norm<16>, relu>>, classifier_head<16, 10>>;

int main() { return int(widening::parameter_count); }
