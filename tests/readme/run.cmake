# The README cannot drift from the code: its complete C++ programs are
# extracted, built against an install of petra (find_package, as a user's
# project would, with -Wall -Wextra -Wpedantic -Werror) and run; each must
# exit with 0. Its excerpts must match the files they name (the extractor
# checks them, and refuses any C++ block that is neither).
# Its shell blocks marked "(the readme test runs these commands):" run too,
# in order, with bash (-e: the first failing command fails the test), in a
# directory where scripts/ and bench/ are the source tree's and build/ is
# the build tree's (its examples built), as they are for a user at the top
# of a checkout built into build/. They use /usr/bin/python3 with NumPy,
# PyTorch, ONNX and OpenCV (scripts/test installs them); without those, they
# are reported skipped.
# Invoked by ctest with PETRA_SOURCE_DIR, BUILD_DIR, WORK_DIR, GENERATOR,
# CXX_COMPILER, EXTRACT (the readme_extract program), JOBS and CXX_FLAGS.
foreach(variable PETRA_SOURCE_DIR BUILD_DIR WORK_DIR GENERATOR CXX_COMPILER EXTRACT JOBS)
  if(NOT DEFINED ${variable})
    message(FATAL_ERROR "run.cmake needs -D${variable}=...")
  endif()
endforeach()

file(REMOVE_RECURSE ${WORK_DIR})
set(programs ${WORK_DIR}/programs)

function(run_step description)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "${description} failed (${result}):\n${output}")
  endif()
  message(STATUS "${description}: ok")
endfunction()

# 1. The README's blocks sorted: programs written out, excerpts checked.
execute_process(COMMAND ${EXTRACT} ${PETRA_SOURCE_DIR}/README.md ${programs} ${PETRA_SOURCE_DIR}
  RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "README.md has C++ blocks that cannot be checked:\n${output}")
endif()
message(STATUS "${output}")

# 2. petra alone installed into a prefix.
run_step("configure petra for installation"
  ${CMAKE_COMMAND} -S ${PETRA_SOURCE_DIR} -B ${WORK_DIR}/petra-build -G ${GENERATOR}
    -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_INSTALL_PREFIX=${WORK_DIR}/prefix
    -DPETRA_BUILD_TESTS=OFF -DPETRA_BUILD_BENCHMARKS=OFF -DPETRA_BUILD_EXAMPLES=OFF)
run_step("install petra" ${CMAKE_COMMAND} --build ${WORK_DIR}/petra-build --target install)

# 3. The programs, one target each, built in parallel.
run_step("configure the README's programs"
  ${CMAKE_COMMAND} -S ${programs} -B ${programs}/build -G ${GENERATOR} -DCMAKE_BUILD_TYPE=Release
    -DCMAKE_CXX_COMPILER=${CXX_COMPILER} "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}" -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix)
run_step("build the README's programs" ${CMAKE_COMMAND} --build ${programs}/build --parallel ${JOBS})

# 4. Each program run in the programs' directory (the checkpoint example
# writes a file there); a non-zero exit fails the test.
file(STRINGS ${programs}/programs.txt targets)
file(STRINGS ${programs}/benchmarks.txt benchmark_targets)
foreach(target IN LISTS targets)
  string(REGEX REPLACE "^readme_line_" "" line ${target})
  # A benchmark program runs each benchmark briefly: the test checks that it
  # runs, not how fast.
  set(arguments)
  list(FIND benchmark_targets ${target} benchmark_index)
  if(NOT benchmark_index EQUAL -1)
    set(arguments --benchmark_min_time=0.01)
  endif()
  execute_process(COMMAND ${programs}/build/${target} ${arguments} WORKING_DIRECTORY ${programs} TIMEOUT 120
    RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "The program at README.md line ${line} exited with ${result}:\n${output}")
  endif()
  message(STATUS "README.md line ${line}: ok\n${output}")
endforeach()

# 4b. The programs that checkpoint: each stopped by SIGINT once its
# checkpoint exists, run again to resume, its last line (the digest) the
# same as an uninterrupted run's (interrupt_and_resume.sh, in a directory of
# its own).
file(STRINGS ${programs}/interrupted.txt interrupted_targets)
foreach(target IN LISTS interrupted_targets)
  string(REGEX REPLACE "^readme_line_" "" line ${target})
  execute_process(COMMAND ${CMAKE_CURRENT_LIST_DIR}/interrupt_and_resume.sh ${programs}/build/${target}
      ${WORK_DIR}/interrupted_${line}
    TIMEOUT 300 RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "The program at README.md line ${line}, interrupted and resumed, failed (${result}):\n${output}")
  endif()
  message(STATUS "README.md line ${line} (interrupted and resumed): ok\n${output}")
endforeach()

# 5. The shell blocks, in order, from one directory standing for the top of
# a checkout.
file(STRINGS ${programs}/commands.txt scripts)
if(scripts)
  execute_process(COMMAND /usr/bin/python3 -c "import numpy, torch, onnx, cv2"
    RESULT_VARIABLE python_result OUTPUT_QUIET ERROR_QUIET)
  if(NOT python_result EQUAL 0)
    message(STATUS "README.md's shell blocks: skipped (/usr/bin/python3 lacks numpy, torch, onnx or cv2)")
    return()
  endif()
  set(top ${WORK_DIR}/checkout)
  file(MAKE_DIRECTORY ${top})
  file(CREATE_LINK ${PETRA_SOURCE_DIR}/scripts ${top}/scripts SYMBOLIC)
  file(CREATE_LINK ${PETRA_SOURCE_DIR}/bench ${top}/bench SYMBOLIC)
  file(CREATE_LINK ${BUILD_DIR} ${top}/build SYMBOLIC)
  foreach(script IN LISTS scripts)
    string(REGEX REPLACE "^readme_line_([0-9]+)\\.sh$" "\\1" line ${script})
    execute_process(COMMAND bash -e -o pipefail ${programs}/${script} WORKING_DIRECTORY ${top} TIMEOUT 300
      RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
    if(NOT result EQUAL 0)
      message(FATAL_ERROR "The commands at README.md line ${line} failed (${result}):\n${output}")
    endif()
    message(STATUS "README.md line ${line} (commands): ok\n${output}")
  endforeach()
endif()
