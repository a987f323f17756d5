// expected: A network begins with the shape of its input, input<C, H, W>.
// The input shape forgotten.
#include <petra/core.hpp>

using namespace petra;

using without_input = network<stem<chain<conv2d<1, 16>, batch_norm<16>, relu>>, classifier_head<16, 10>>;

int main() { return int(without_input::parameter_count); }
