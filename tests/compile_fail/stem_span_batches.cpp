// expected: This layer's forward cannot be called as the layer contract (layers/layer.hpp) calls it: forward(pass, parameters, state, x, y, workspace), x and y batch views, for every pass.
// A user's layer that takes its batches as std::span, as a stem's F (before the convolution that widens the image).
#include "user_types.hpp"

using namespace petra;

using net = network<input<2, 8, 8>, stem<user::span_batches>, classifier_head<2, 10>>;

int main() { return int(net::parameter_count); }
