// expected: This block says it is reversible but has no inverse the block contract (blocks/block.hpp) can call: inverse(parameters, state, y, x, workspace).
// A user's block that says it is reversible but has no inverse.
#include "user_types.hpp"

using namespace petra;

using broken = network<input<1, 8, 8>, stem<chain<conv2d<1, 16>, batch_norm<16>, relu>>, user::doubling_block<true>,
                       classifier_head<16, 10>>;

int main() { return int(broken::parameter_count); }
