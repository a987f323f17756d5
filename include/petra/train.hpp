// The trainers: exact backprop (stores activations) and reversible backprop
// (reconstructs them), the baselines of PETRA; checkpoint files; the
// training loop over any method (train/training_loop.hpp). PETRA on MPI
// ranks as a method is train/mpi_training.hpp, for code that links MPI.
#pragma once

#include <petra/error.hpp>
#if PETRA_EXCEPTIONS
// Checkpoint files report with exceptions only (error.hpp).
#include <petra/train/checkpoint.hpp>
#include <petra/train/sharded_checkpoint.hpp>
#include <petra/train/training_loop.hpp>
#include <petra/train/training_methods.hpp>
#endif
#include <petra/train/data_source.hpp>
#include <petra/train/exact_backprop.hpp>
#include <petra/train/reversible_backprop.hpp>
#include <petra/train/trainer_support.hpp>
#include <petra/train/training_method.hpp>
#include <petra/train/training_plan.hpp>
