// Every layer (floor 3): types with compile-time shapes, forward and backward.
#pragma once

#include <petra/layers/batch_norm.hpp>
#include <petra/layers/chain.hpp>
#include <petra/layers/conv2d.hpp>
#include <petra/layers/dense.hpp>
#include <petra/layers/flatten.hpp>
#include <petra/layers/layer.hpp>
#include <petra/layers/pooling.hpp>
#include <petra/layers/precision.hpp>
#include <petra/layers/relu.hpp>
#include <petra/layers/softmax_cross_entropy_loss.hpp>
#include <petra/shape.hpp>
