# The command lines of the benchmark programs that are not Google
# Benchmark's (bench/command_line.hpp): for each of PROGRAMS (a list of
# paths), --help prints the usage on stdout and ends with status 0, and an
# unknown option ends with status 2 after a sentence that names it and the
# usage on stderr; for RECONSTRUCTION, a batch of 0 or 1, a malformed seed
# and a positional argument are refused so as well. Nothing here runs a
# benchmark: every call ends before any work.
foreach(variable PROGRAMS RECONSTRUCTION)
  if(NOT DEFINED ${variable})
    message(FATAL_ERROR "bench_command_lines.cmake needs -D${variable}=...")
  endif()
endforeach()

# Runs PROGRAM with the arguments after EXPECT_STATUS and STREAM_PATTERN;
# fails unless it ends with EXPECT_STATUS and the stream (stdout for status
# 0, stderr otherwise) matches STREAM_PATTERN.
function(expect program expect_status stream_pattern)
  execute_process(COMMAND ${program} ${ARGN} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err
                  TIMEOUT 20)
  if(expect_status EQUAL 0)
    set(stream "${out}")
  else()
    set(stream "${err}")
  endif()
  if(NOT "${status}" STREQUAL "${expect_status}")
    message(FATAL_ERROR "${program} ${ARGN}: status ${status}, ${expect_status} expected\nstdout: ${out}\nstderr: ${err}")
  endif()
  if(NOT stream MATCHES "${stream_pattern}")
    message(FATAL_ERROR "${program} ${ARGN}: output does not match '${stream_pattern}'\nstdout: ${out}\nstderr: ${err}")
  endif()
  message(STATUS "${program} ${ARGN}: status ${status}, as expected")
endfunction()

foreach(program IN LISTS PROGRAMS)
  expect(${program} 0 "^usage: " --help)
  expect(${program} 2 "unknown option --no-such-option\nusage: " --no-such-option)
endforeach()
expect(${RECONSTRUCTION} 0 "--batch N.*--seed N" --help)
expect(${RECONSTRUCTION} 2 "--batch needs a positive count\nusage: " --batch 0)
expect(${RECONSTRUCTION} 2 "--batch needs at least 2 images" --batch 1)
expect(${RECONSTRUCTION} 2 "--seed needs a positive count\nusage: " --seed 1x)
expect(${RECONSTRUCTION} 2 "--batch needs a positive count\nusage: " --batch)
expect(${RECONSTRUCTION} 2 "unknown option 64\nusage: " 64)
