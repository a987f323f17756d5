// The trainers: exact backprop (stores activations) and reversible backprop
// (reconstructs them), the baselines of PETRA; checkpoint files.
#pragma once

#include <petra/error.hpp>
#if PETRA_EXCEPTIONS
// Checkpoint files report with exceptions only (error.hpp).
#include <petra/train/checkpoint.hpp>
#include <petra/train/sharded_checkpoint.hpp>
#endif
#include <petra/train/exact_backprop.hpp>
#include <petra/train/reversible_backprop.hpp>
#include <petra/train/trainer_support.hpp>
