# Builds and runs the consumer project twice: against an install of petra into
# a temporary prefix (find_package), and with add_subdirectory. Invoked by
# ctest with PETRA_SOURCE_DIR, WORK_DIR, GENERATOR and CXX_COMPILER.
foreach(variable PETRA_SOURCE_DIR WORK_DIR GENERATOR CXX_COMPILER)
  if(NOT DEFINED ${variable})
    message(FATAL_ERROR "run.cmake needs -D${variable}=...")
  endif()
endforeach()

file(REMOVE_RECURSE ${WORK_DIR})
set(consumer_source ${PETRA_SOURCE_DIR}/tests/consumer)

function(run_step description)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "${description} failed (${result}):\n${output}")
  endif()
  message(STATUS "${description}: ok")
endfunction()

# 1. Install petra alone (no tests, benchmarks or examples) into a prefix.
run_step("configure petra for installation"
  ${CMAKE_COMMAND} -S ${PETRA_SOURCE_DIR} -B ${WORK_DIR}/petra-build -G ${GENERATOR}
    -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_INSTALL_PREFIX=${WORK_DIR}/prefix
    -DPETRA_BUILD_TESTS=OFF -DPETRA_BUILD_BENCHMARKS=OFF -DPETRA_BUILD_EXAMPLES=OFF)
run_step("install petra" ${CMAKE_COMMAND} --build ${WORK_DIR}/petra-build --target install)

# 2. find_package against the installed prefix.
run_step("configure the consumer with find_package"
  ${CMAKE_COMMAND} -S ${consumer_source} -B ${WORK_DIR}/package -G ${GENERATOR}
    -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DPETRA_CONSUME=package)
run_step("build the consumer with find_package" ${CMAKE_COMMAND} --build ${WORK_DIR}/package)
run_step("run the consumer with find_package" ${WORK_DIR}/package/consumer)

# 3. add_subdirectory of the source tree: petra is then not the top-level
# project, so its tests, benchmarks and examples stay off.
run_step("configure the consumer with add_subdirectory"
  ${CMAKE_COMMAND} -S ${consumer_source} -B ${WORK_DIR}/subdirectory -G ${GENERATOR}
    -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DPETRA_CONSUME=subdirectory -DPETRA_SOURCE_DIR=${PETRA_SOURCE_DIR})
run_step("build the consumer with add_subdirectory" ${CMAKE_COMMAND} --build ${WORK_DIR}/subdirectory)
run_step("run the consumer with add_subdirectory" ${WORK_DIR}/subdirectory/consumer)
