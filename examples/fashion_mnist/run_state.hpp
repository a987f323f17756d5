// A run's position and its finished epochs: the training loop's
// (petra/train/training_loop.hpp), by the job's names for them.
#pragma once

#include <petra/petra.hpp>

namespace fashion {

using run_position = petra::training_position;
using epoch_record = petra::epoch_record;

} // namespace fashion
