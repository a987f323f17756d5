// expected: This block says it passes its first half through but does not take and give pairs of halves of one shape
// A user's block on a plain shape that says it passes its first half through.
#include "user_types.hpp"

using namespace petra;

using broken = network<input<2, 8, 8>, user::half_passing_plain_block, stem<chain<conv2d<2, 16>, batch_norm<16>, relu>>,
                       classifier_head<16, 10>>;

int main() { return int(broken::parameter_count); }
