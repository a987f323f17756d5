# readme_extract on a fixture with one block of each kind it refuses: it must
# fail, name each refused block's line and why, and accept the others.
# Arguments: -DEXTRACT= -DFIXTURE= -DPETRA_SOURCE_DIR= -DWORK_DIR=
file(REMOVE_RECURSE ${WORK_DIR})
execute_process(COMMAND ${EXTRACT} ${FIXTURE} ${WORK_DIR} ${PETRA_SOURCE_DIR}
  RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
if(result EQUAL 0)
  message(FATAL_ERROR "readme_extract accepted ${FIXTURE}, which it must refuse:\n${output}")
endif()
foreach(expected
    "refusals.md:11: this ```cpp block is neither a complete program"
    "refusals.md:17: this block is marked as an excerpt of examples/two_spirals.cpp, but its lines are not"
    "refusals.md:23: this block is marked as an excerpt of examples/no_such_file.cpp, which does not exist"
    "5 C++ blocks, 1 complete programs (0 interrupted and resumed), 1 checked excerpts, 1 shell blocks run")
  string(FIND "${output}" "${expected}" position)
  if(position EQUAL -1)
    message(FATAL_ERROR "readme_extract should have said\n  ${expected}\nbut said:\n${output}")
  endif()
endforeach()
file(READ ${WORK_DIR}/commands.txt scripts)
file(GLOB written ${WORK_DIR}/*.sh)
list(LENGTH written written_count)
if(NOT written_count EQUAL 1 OR NOT scripts MATCHES "^readme_line_[0-9]+\\.sh\n$")
  message(FATAL_ERROR "readme_extract should have written the one marked shell block, not: ${scripts} ${written}")
endif()
file(READ ${written} script)
if(NOT script MATCHES "echo run" OR script MATCHES "not run")
  message(FATAL_ERROR "readme_extract wrote the wrong shell block: ${script}")
endif()
message(STATUS "refused as expected:\n${output}")
