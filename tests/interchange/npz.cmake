# The core's interchange tests (petra::core only, so the sanitizer builds
# and the aarch64 cross build run them too, label 'portable' as well): the
# arrays' names, NumPy files, and the ONNX model's bytes.
petra_add_core_test(test_parameter_names interchange/test_parameter_names.cpp)
petra_add_core_test(test_npz interchange/test_npz.cpp)
petra_add_core_test(test_onnx interchange/test_onnx.cpp)
set(petra_portable_interchange_tests test_parameter_names test_npz test_onnx)
