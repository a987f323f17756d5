// expected: This layer states no backward_flops: the layer contract (layers/layer.hpp) asks for static constexpr std::size_t backward_flops.
// A user's layer without backward_flops, used directly as a coupling's F.
#include "user_types.hpp"

using namespace petra;

using net = network<input<1, 8, 8>, stem<chain<conv2d<1, 16>, batch_norm<16>, relu>>,
                    additive_coupling<user::no_backward_flops>, classifier_head<16, 10>>;

int main() { return int(net::parameter_count); }
