// expected: export_onnx: the network ends in a pair of halves, not in a head that gives the logits.
// A network that stops at its couplings (its output is the pair of halves,
// which petra computes) exported to ONNX, whose graph must end in logits.
#include <petra/core.hpp>
#include <petra/interchange/onnx.hpp>

using namespace petra;

using headless =
    network<input<1, 8, 8>, stem<chain<conv2d<1, 16>, batch_norm<16>, relu>>, additive_coupling<residual_function<8>>>;

int main()
{
    const auto parameters = headless::make_parameters<float>(1);
    return int(onnx_model_bytes(parameters).size());
}
