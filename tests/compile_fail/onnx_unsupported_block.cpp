// expected: export_onnx: this block has no ONNX form (those that have one: stem, additive_coupling, revnet_coupling, downsample, pixel_unshuffle and head).
// A user's block (both halves doubled, keeping its input as a block that is
// not reversible does), which petra trains and runs, in a network exported to
// ONNX, which has no form for it.
#include <petra/interchange/onnx.hpp>

#include "user_types.hpp"

using namespace petra;

using doubled = network<input<1, 8, 8>, stem<chain<conv2d<1, 16>, batch_norm<16>, relu>>, user::doubling_block<false>,
                        classifier_head<16, 10>>;

int main()
{
    const auto parameters = doubled::make_parameters<float>(1);
    return int(onnx_model_bytes(parameters).size());
}
