// expected: This layer states no backward_flops: the layer contract (layers/layer.hpp) asks for static constexpr std::size_t backward_flops.
// A user's layer without backward_flops, as a head's F, before the pooling and the dense layer.
#include "user_types.hpp"

using namespace petra;

using net = network<input<1, 8, 8>, stem<chain<conv2d<1, 16>, batch_norm<16>, relu>>,
                    head<chain<user::no_backward_flops, global_average_pool, dense<16, 10>>>>;

int main() { return int(net::parameter_count); }
