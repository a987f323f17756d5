# The documentation cannot drift from the code: the complete C++ programs of
# README.md, docs/*.md and examples/fashion_mnist/README.md are extracted,
# built against an install of petra (find_package, as a user's project
# would, with -Wall -Wextra -Wpedantic -Werror) and run; each must exit with
# 0. Their excerpts must match the files they name (the extractor checks
# them, and refuses any C++ block that is neither).
# Their shell blocks marked "(the readme test runs these commands):" run too,
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

# 1. Each document's blocks sorted: README.md, docs/*.md and the job's
# README, each into a directory of its own whose targets carry its name
# (docs/kernels.md: docs_kernels_line_<N>); one project builds them all.
file(GLOB documents RELATIVE ${PETRA_SOURCE_DIR} ${PETRA_SOURCE_DIR}/docs/*.md)
list(SORT documents)
set(documents README.md ${documents} examples/fashion_mnist/README.md)
set(prefixes)
file(MAKE_DIRECTORY ${programs})
set(top_project "cmake_minimum_required(VERSION 3.25)\nproject(petra_documentation_programs LANGUAGES CXX)\n")
foreach(document IN LISTS documents)
  string(TOLOWER "${document}" prefix)
  string(REGEX REPLACE "\\.md$" "" prefix "${prefix}")
  string(REGEX REPLACE "[^a-z0-9]" "_" prefix "${prefix}")
  execute_process(COMMAND ${EXTRACT} ${PETRA_SOURCE_DIR}/${document} ${programs}/${prefix} ${PETRA_SOURCE_DIR} ${prefix}
    RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "${document} has C++ blocks that cannot be checked:\n${output}")
  endif()
  message(STATUS "${output}")
  set(document_of_${prefix} ${document})
  list(APPEND prefixes ${prefix})
  string(APPEND top_project "add_subdirectory(${prefix})\n")
endforeach()
file(WRITE ${programs}/CMakeLists.txt "${top_project}")

# 2. petra alone installed into a prefix.
run_step("configure petra for installation"
  ${CMAKE_COMMAND} -S ${PETRA_SOURCE_DIR} -B ${WORK_DIR}/petra-build -G ${GENERATOR}
    -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_INSTALL_PREFIX=${WORK_DIR}/prefix
    -DPETRA_BUILD_TESTS=OFF -DPETRA_BUILD_BENCHMARKS=OFF -DPETRA_BUILD_EXAMPLES=OFF)
run_step("install petra" ${CMAKE_COMMAND} --build ${WORK_DIR}/petra-build --target install)

# 3. The programs, one target each, built in parallel.
run_step("configure the documents' programs"
  ${CMAKE_COMMAND} -S ${programs} -B ${programs}/build -G ${GENERATOR} -DCMAKE_BUILD_TYPE=Release
    -DCMAKE_CXX_COMPILER=${CXX_COMPILER} "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}" -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix)
run_step("build the documents' programs" ${CMAKE_COMMAND} --build ${programs}/build --parallel ${JOBS})

# 4. Each program run in its document's directory (the checkpoint example
# writes a file there); a non-zero exit fails the test.
foreach(prefix IN LISTS prefixes)
  set(document ${document_of_${prefix}})
  file(STRINGS ${programs}/${prefix}/programs.txt targets)
  file(STRINGS ${programs}/${prefix}/benchmarks.txt benchmark_targets)
  foreach(target IN LISTS targets)
    string(REGEX REPLACE "^.*_line_" "" line ${target})
    # A benchmark program runs each benchmark briefly: the test checks that it
    # runs, not how fast.
    set(arguments)
    list(FIND benchmark_targets ${target} benchmark_index)
    if(NOT benchmark_index EQUAL -1)
      set(arguments --benchmark_min_time=0.01)
    endif()
    execute_process(COMMAND ${programs}/build/${prefix}/${target} ${arguments} WORKING_DIRECTORY ${programs}/${prefix}
      TIMEOUT 120 RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
    if(NOT result EQUAL 0)
      message(FATAL_ERROR "The program at ${document} line ${line} exited with ${result}:\n${output}")
    endif()
    message(STATUS "${document} line ${line}: ok\n${output}")
  endforeach()

  # 4b. The programs that checkpoint: each stopped by SIGINT once its
  # checkpoint exists, run again to resume, its last line (the digest) the
  # same as an uninterrupted run's (interrupt_and_resume.sh, in a directory
  # of its own).
  file(STRINGS ${programs}/${prefix}/interrupted.txt interrupted_targets)
  foreach(target IN LISTS interrupted_targets)
    string(REGEX REPLACE "^.*_line_" "" line ${target})
    execute_process(COMMAND ${CMAKE_CURRENT_LIST_DIR}/interrupt_and_resume.sh ${programs}/build/${prefix}/${target}
        ${WORK_DIR}/interrupted_${prefix}_${line}
      TIMEOUT 300 RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
    if(NOT result EQUAL 0)
      message(FATAL_ERROR "The program at ${document} line ${line}, interrupted and resumed, failed (${result}):\n${output}")
    endif()
    message(STATUS "${document} line ${line} (interrupted and resumed): ok\n${output}")
  endforeach()
endforeach()

# 5. The shell blocks, document by document and in order within each, from
# one directory standing for the top of a checkout.
set(any_scripts FALSE)
foreach(prefix IN LISTS prefixes)
  file(STRINGS ${programs}/${prefix}/commands.txt scripts)
  if(scripts)
    set(any_scripts TRUE)
  endif()
endforeach()
if(NOT any_scripts)
  return()
endif()
execute_process(COMMAND /usr/bin/python3 -c "import numpy, torch, onnx, cv2"
  RESULT_VARIABLE python_result OUTPUT_QUIET ERROR_QUIET)
if(NOT python_result EQUAL 0)
  message(STATUS "The documents' shell blocks: skipped (/usr/bin/python3 lacks numpy, torch, onnx or cv2)")
  return()
endif()
set(top ${WORK_DIR}/checkout)
file(MAKE_DIRECTORY ${top})
file(CREATE_LINK ${PETRA_SOURCE_DIR}/scripts ${top}/scripts SYMBOLIC)
file(CREATE_LINK ${PETRA_SOURCE_DIR}/bench ${top}/bench SYMBOLIC)
file(CREATE_LINK ${BUILD_DIR} ${top}/build SYMBOLIC)
foreach(prefix IN LISTS prefixes)
  set(document ${document_of_${prefix}})
  file(STRINGS ${programs}/${prefix}/commands.txt scripts)
  foreach(script IN LISTS scripts)
    string(REGEX REPLACE "^.*_line_([0-9]+)\\.sh$" "\\1" line ${script})
    execute_process(COMMAND bash -e -o pipefail ${programs}/${prefix}/${script} WORKING_DIRECTORY ${top} TIMEOUT 300
      RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
    if(NOT result EQUAL 0)
      message(FATAL_ERROR "The commands at ${document} line ${line} failed (${result}):\n${output}")
    endif()
    message(STATUS "${document} line ${line} (commands): ok\n${output}")
  endforeach()
endforeach()
