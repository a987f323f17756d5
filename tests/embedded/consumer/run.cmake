# Builds the consumer project of this directory without exceptions or RTTI
# (add_subdirectory of petra's source tree) and runs its programs, checking
# their exit status and what the error handler printed. Invoked by ctest with
# PETRA_SOURCE_DIR, WORK_DIR, GENERATOR, CXX_COMPILER and CXX_FLAGS.
foreach(variable PETRA_SOURCE_DIR WORK_DIR GENERATOR CXX_COMPILER)
  if(NOT DEFINED ${variable})
    message(FATAL_ERROR "run.cmake needs -D${variable}=...")
  endif()
endforeach()

file(REMOVE_RECURSE ${WORK_DIR})
get_filename_component(consumer_source ${CMAKE_CURRENT_LIST_DIR} ABSOLUTE)

function(run_step description)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "${description} failed (${result}):\n${output}")
  endif()
  message(STATUS "${description}: ok")
endfunction()

# Runs a program that must end with `expected_result` (a status, or CMake's
# "Subprocess aborted" for SIGABRT) and print `expected_error` to stderr.
function(expect_failure description expected_result expected_error)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE errors)
  if(NOT "${result}" STREQUAL "${expected_result}")
    message(FATAL_ERROR "${description}: ended with '${result}', not '${expected_result}':\n${output}${errors}")
  endif()
  string(FIND "${errors}" "${expected_error}" found)
  if(found EQUAL -1)
    message(FATAL_ERROR "${description}: stderr does not hold '${expected_error}':\n${errors}")
  endif()
  message(STATUS "${description}: ok")
endfunction()

run_step("configure the consumer without exceptions or RTTI"
  ${CMAKE_COMMAND} -S ${consumer_source} -B ${WORK_DIR} -G ${GENERATOR} -DCMAKE_BUILD_TYPE=Release
    -DCMAKE_CXX_COMPILER=${CXX_COMPILER} "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}" -DPETRA_SOURCE_DIR=${PETRA_SOURCE_DIR})
run_step("build the consumer" ${CMAKE_COMMAND} --build ${WORK_DIR} --parallel 2)
run_step("infer with no allocation" ${WORK_DIR}/inference)
run_step("train on threads and stop mid-epoch" ${WORK_DIR}/training train)

set(bad_label "invalid_argument: exact_backprop: label 12 of example 2 is outside [0, 10).")
expect_failure("a bad label reaches the user's handler" 3 "handler: ${bad_label}" ${WORK_DIR}/bad_label custom)
expect_failure("a bad label reaches the default handler, which aborts" "Subprocess aborted" "petra: ${bad_label}"
  ${WORK_DIR}/bad_label default)
expect_failure("a stage's failure reaches the handler on its thread" 4
  "handler: runtime_error: stage 2 (blocks 3 to 5): the loss of micro-batch 1 of this epoch is not finite"
  ${WORK_DIR}/training failure)
