// expected: This layer's forward cannot be called as the layer contract (layers/layer.hpp) calls it: forward(pass, parameters, state, x, y, workspace), x and y batch views, for every pass.
// A user's layer that takes its batches as std::span, used directly as a coupling's F.
#include "user_types.hpp"

using namespace petra;

using net = network<input<1, 8, 8>, stem<chain<conv2d<1, 16>, batch_norm<16>, relu>>,
                    additive_coupling<user::span_batches>, classifier_head<16, 10>>;

int main() { return int(net::parameter_count); }
