// expected: export_onnx: this layer has no ONNX form (those that have one: conv2d, batch_norm, relu, global_average_pool, flatten, dense and chains of them).
// A user's layer (a per-channel gain, which petra trains and runs) in a
// coupling of a network exported to ONNX, which has no operator for it.
#include <petra/interchange/onnx.hpp>

#include "user_types.hpp"

using namespace petra;

using gained = network<input<1, 8, 8>, stem<chain<conv2d<1, 16>, batch_norm<16>, relu>>,
                       additive_coupling<chain<conv2d<8, 8>, user::working_scale>>, classifier_head<16, 10>>;

int main()
{
    const auto parameters = gained::make_parameters<float>(1);
    return int(onnx_model_bytes(parameters).size());
}
