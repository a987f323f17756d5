// expected: The first block of the network cannot take the network's input shape.
// A colour image given to a stem made for one channel.
#include <petra/core.hpp>

using namespace petra;

using wrong_input = network<input<3, 8, 8>, stem<chain<conv2d<1, 16>, batch_norm<16>, relu>>, classifier_head<16, 10>>;

int main() { return int(wrong_input::parameter_count); }
