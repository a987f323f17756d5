// What a pipeline's user chooses (floor 7): the micro-batch size, the
// accumulation factor and the two buffers that turn PETRA into its
// delayed-gradient relatives. Both drivers, each stage and each stage's
// worker take the same options. The stage refuses a batch of 0, the worker
// an accumulation of 0 (std::invalid_argument).
#pragma once

#include <cstddef>

namespace petra {

struct pipeline_options {
    std::size_t batch = 64;        // examples per micro-batch
    std::size_t accumulation = 1;  // micro-batches per optimizer step (k)
    bool input_buffer = false;     // every block keeps its input (no reconstruction)
    bool parameter_buffer = false; // weight stashing: backward uses the forward's parameters
};

} // namespace petra
