# Included by interchange.cmake (with petra::petra, not in sanitizer
# builds): paths are relative to tests/. ONNX export run by other runtimes,
# label 'interchange'; the wire format and the model's bytes are checked in
# C++ by test_onnx (npz.cmake).

# End to end: the exported models of the reference networks (on real test
# images) and of networks with every block kind, through onnx's checker and
# OpenCV's dnn module, whose logits must equal predict's (check_onnx.py).
# Skipped (77) without numpy, onnx or cv2, or without the data set.
add_executable(onnx_export_cases interchange/onnx_export_cases.cpp)
target_link_libraries(onnx_export_cases PRIVATE petra::petra petra_project_options)
add_test(NAME onnx_export
  COMMAND ${PETRA_INTERCHANGE_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/interchange/check_onnx.py
    $<TARGET_FILE:onnx_export_cases> ${CMAKE_CURRENT_BINARY_DIR}/onnx_export)
set_tests_properties(onnx_export PROPERTIES LABELS interchange TIMEOUT 300 SKIP_RETURN_CODE 77
  ENVIRONMENT OPENBLAS_NUM_THREADS=1)
