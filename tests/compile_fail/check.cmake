# Builds one compile-fail target and checks that the build fails, that the
# compiler's FIRST error carries the sentence on the source's first line
# ("// expected: ...") and, with g++, that it is the only error (no cascade
# of template errors behind it). Arguments: -DBUILD_DIR= -DTARGET= -DSOURCE=
# -DCOMPILER_ID= (CMAKE_CXX_COMPILER_ID).
#
# clang++ 14 goes on after the first error: a class whose static_assert
# failed is invalid there, so the `if constexpr` that reads its value to stop
# binding (network.hpp, chain.hpp) is not a constant expression, and
# instantiation goes on. With clang the sentence must come first; the errors
# after it are counted, not refused.
foreach(variable BUILD_DIR TARGET SOURCE COMPILER_ID)
  if(NOT DEFINED ${variable} OR "${${variable}}" STREQUAL "")
    message(FATAL_ERROR "check.cmake needs -D${variable}=...")
  endif()
endforeach()
file(STRINGS "${SOURCE}" first_line LIMIT_COUNT 1)
string(REGEX REPLACE "^// expected: " "" expected "${first_line}")
if(expected STREQUAL first_line OR expected STREQUAL "")
  message(FATAL_ERROR "${SOURCE} does not begin with '// expected: <sentence>'")
endif()

execute_process(COMMAND "${CMAKE_COMMAND}" --build "${BUILD_DIR}" --target "${TARGET}"
  RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
if(result EQUAL 0)
  message(FATAL_ERROR "${TARGET} compiled, but it must not:\n${output}")
endif()

string(REGEX MATCH "[^\n]*error:[^\n]*" first_error "${output}")
if(first_error STREQUAL "")
  message(FATAL_ERROR "${TARGET} failed without a compiler error:\n${output}")
endif()
string(FIND "${first_error}" "${expected}" position)
if(position EQUAL -1)
  message(FATAL_ERROR "The first error of ${TARGET} is\n  ${first_error}\nbut it should carry\n  ${expected}\n\n${output}")
endif()
string(REGEX MATCHALL "error:" errors "${output}")
list(LENGTH errors error_count)
if(NOT COMPILER_ID STREQUAL "GNU")
  message(STATUS "the first of ${error_count} errors (${COMPILER_ID}), as expected: ${first_error}")
  return()
endif()
if(NOT error_count EQUAL 1)
  message(FATAL_ERROR "${TARGET} gave ${error_count} errors; the first is right, but it should be the only one:\n${output}")
endif()
message(STATUS "the one error, as expected: ${first_error}")
