# The names of the arrays and the NumPy files: petra::core only, so the
# aarch64 cross build runs them too (label 'portable' as well).
petra_add_core_test(test_parameter_names interchange/test_parameter_names.cpp)
set(petra_portable_interchange_tests test_parameter_names)
petra_add_core_test(test_npz interchange/test_npz.cpp)
list(APPEND petra_portable_interchange_tests test_npz)
