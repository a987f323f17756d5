# Included by tests/CMakeLists.txt: paths are relative to tests/.
# Weights in and out (ctest label 'interchange'): the arrays' names, NumPy
# files, PyTorch both ways and ONNX export. The tests that run Python need
# Debian's python3-numpy, python3-torch, python3-onnx and python3-opencv for
# /usr/bin/python3 (scripts/test installs them); without them those tests
# report themselves skipped (exit code 77).
set(PETRA_INTERCHANGE_PYTHON /usr/bin/python3 CACHE FILEPATH
  "The Python interpreter with numpy, torch, onnx and cv2 for the interchange tests")

include(${CMAKE_CURRENT_LIST_DIR}/npz.cmake)
# The tests of PyTorch and ONNX need petra::petra (the real data set). Not
# in sanitizer builds: they check that other runtimes compute petra's
# numbers, which no sanitizer changes, and the reference networks train
# slowly there (torch_interchange took 78 s under AddressSanitizer against
# 20 s); the C++ they rest on (the .npz reader and writer, the ONNX bytes)
# runs under sanitizers in test_npz, test_onnx and the fuzzer.
if(PETRA_DATA AND NOT PETRA_SANITIZER)
  include(${CMAKE_CURRENT_LIST_DIR}/torch.cmake OPTIONAL)
  include(${CMAKE_CURRENT_LIST_DIR}/onnx.cmake OPTIONAL)
endif()
