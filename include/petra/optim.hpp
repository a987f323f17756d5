// The optimizer floor: SGD with momentum and masked weight decay, and
// learning-rate schedules.
#pragma once

#include <petra/optim/schedule.hpp>
#include <petra/optim/sgd.hpp>
