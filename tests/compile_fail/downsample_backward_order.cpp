// expected: This layer's backward cannot be called as the layer contract (layers/layer.hpp) calls it: backward(parameters, x, grad_y, grad_x, grad_parameters, workspace), in that order, x, grad_y and grad_x batch views.
// A user's layer whose backward takes the parameters after the batches, as a downsampling's G.
#include "user_types.hpp"

using namespace petra;

using net = network<
    input<1, 8, 8>, stem<chain<conv2d<1, 16>, batch_norm<16>, relu>>,
    downsample<chain<conv2d<8, 8, 3, 2>, batch_norm<8>, relu>, chain<conv2d<8, 8, 1, 2, 0>, user::swapped_backward>>,
    classifier_head<16, 10>>;

int main() { return int(net::parameter_count); }
