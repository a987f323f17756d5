// A run's position and finished epochs: petra/train/training_loop.hpp's, by the job's names.
#pragma once

#include <petra/petra.hpp>

namespace fashion {

using run_position = petra::training_position;
using epoch_record = petra::epoch_record;

} // namespace fashion
