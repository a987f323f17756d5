// The trainers: exact backprop (stores activations) and reversible backprop
// (reconstructs them), the baselines of PETRA; checkpoint files.
#pragma once

#include <petra/error.hpp>
#if PETRA_EXCEPTIONS
#include <petra/train/checkpoint.hpp> // reports with exceptions only (error.hpp)
#endif
#include <petra/train/exact_backprop.hpp>
#include <petra/train/reversible_backprop.hpp>
#include <petra/train/trainer_support.hpp>
