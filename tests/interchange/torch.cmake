# PyTorch both ways (label 'interchange'; included by interchange.cmake, so
# paths are relative to tests/): petra's two reference networks and their
# PyTorch twins (bench/peer/networks.py) exchange trained weights through
# .npz files (scripts/torch_weights, load_npz, save_npz) and must give the
# same logits on real Fashion-MNIST test images, within 1e-5 of the largest.
# interchange/check_torch.py drives torch_interchange (petra's side) and
# PyTorch in a temporary directory; skipped (77) without torch and numpy
# for PETRA_INTERCHANGE_PYTHON or without the data set.
add_executable(torch_interchange interchange/torch_interchange.cpp)
target_link_libraries(torch_interchange PRIVATE petra::petra petra_project_options)
# With the examples, the imported_weights example scores PyTorch's weights too.
set(petra_imported_weights)
if(PETRA_BUILD_EXAMPLES)
  set(petra_imported_weights --imported-weights $<TARGET_FILE:imported_weights>)
endif()
add_test(NAME torch_interchange
  COMMAND ${PETRA_INTERCHANGE_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/interchange/check_torch.py
    --program $<TARGET_FILE:torch_interchange> --source ${PROJECT_SOURCE_DIR} ${petra_imported_weights})
set_tests_properties(torch_interchange PROPERTIES LABELS interchange SKIP_RETURN_CODE 77 TIMEOUT 600
  ENVIRONMENT OPENBLAS_NUM_THREADS=1)
