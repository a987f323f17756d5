// Every kernel of the lowest floor: SIMD code that knows nothing of layers.
#pragma once

#include <petra/kernels/bf16.hpp>
#include <petra/kernels/cache_sizes.hpp>
#include <petra/kernels/convolution.hpp>
#include <petra/kernels/convolution_bf16.hpp>
#include <petra/kernels/elementwise.hpp>
#include <petra/kernels/gemm.hpp>
#include <petra/kernels/input_map.hpp>
#include <petra/kernels/normalization.hpp>
#include <petra/kernels/optimizer.hpp>
#include <petra/kernels/profile.hpp>
#include <petra/kernels/reduction.hpp>
#include <petra/kernels/scratch.hpp>
#include <petra/kernels/simd.hpp>
#include <petra/kernels/softmax.hpp>
