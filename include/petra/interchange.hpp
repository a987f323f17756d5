// Weights in and out (petra::core): every array's name
// (parameter_names.hpp), NumPy .npz files (save_npz, load_npz; npz_format.hpp
// for any arrays) and the inference graph as ONNX (export_onnx).
#pragma once

#include <petra/interchange/npz.hpp>
#include <petra/interchange/npz_format.hpp>
#include <petra/interchange/onnx.hpp>
#include <petra/parameter_names.hpp>
