# Builds and runs the consumer project of one component (COMPONENT: core,
# data, mpi, benchmark or petra) twice: against an install of petra into a
# temporary prefix (find_package), and with add_subdirectory; the whole
# library (petra) a third time, with pkg-config. Invoked by ctest with
# PETRA_SOURCE_DIR, WORK_DIR, GENERATOR, CXX_COMPILER and COMPONENT.
#
# For core, xtensor and zlib are made unfindable in the consumer
# (CMAKE_DISABLE_FIND_PACKAGE_<name>): petra's package config must not look
# for them when only core is asked for, and petra's own CMakeLists must not
# with PETRA_DATA=OFF. That the disabling bites is checked too: asking for
# the data component the same way must fail.
foreach(variable PETRA_SOURCE_DIR WORK_DIR GENERATOR CXX_COMPILER COMPONENT)
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

set(consumer_options -G ${GENERATOR} -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DPETRA_COMPONENT=${COMPONENT})
if(COMPONENT STREQUAL "core")
  set(without_data -DCMAKE_DISABLE_FIND_PACKAGE_xtensor=ON -DCMAKE_DISABLE_FIND_PACKAGE_ZLIB=ON)
  list(APPEND consumer_options ${without_data})
endif()

# 1. Install petra alone (no tests, benchmarks or examples, every component)
# into a prefix of this test's own.
run_step("configure petra for installation"
  ${CMAKE_COMMAND} -S ${PETRA_SOURCE_DIR} -B ${WORK_DIR}/petra-build -G ${GENERATOR}
    -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_INSTALL_PREFIX=${WORK_DIR}/prefix
    -DPETRA_BUILD_TESTS=OFF -DPETRA_BUILD_BENCHMARKS=OFF -DPETRA_BUILD_EXAMPLES=OFF)
run_step("install petra" ${CMAKE_COMMAND} --build ${WORK_DIR}/petra-build --target install)

# 2. find_package against the installed prefix.
run_step("configure the ${COMPONENT} consumer with find_package"
  ${CMAKE_COMMAND} -S ${consumer_source} -B ${WORK_DIR}/package ${consumer_options}
    -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DPETRA_CONSUME=package)
run_step("build the ${COMPONENT} consumer with find_package" ${CMAKE_COMMAND} --build ${WORK_DIR}/package)
run_step("run the ${COMPONENT} consumer with find_package" ${WORK_DIR}/package/consumer)

# The whole library without CMake: the same program compiled with the flags
# `pkg-config --cflags --libs petra` gives for the installed petra.pc.
if(COMPONENT STREQUAL "petra")
  find_program(pkg_config pkg-config)
  if(NOT pkg_config)
    message(FATAL_ERROR "pkg-config is not installed (Debian's pkg-config); scripts/test installs it")
  endif()
  execute_process(
    COMMAND ${CMAKE_COMMAND} -E env PKG_CONFIG_PATH=${WORK_DIR}/prefix/share/pkgconfig
      ${pkg_config} --cflags --libs petra
    RESULT_VARIABLE result OUTPUT_VARIABLE pkg_config_flags ERROR_VARIABLE pkg_config_error
    OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT result EQUAL 0 OR NOT pkg_config_flags MATCHES "-I${WORK_DIR}/prefix/share/pkgconfig/../../include")
    message(FATAL_ERROR "pkg-config --cflags --libs petra failed or gave no include directory (${result}):\n"
      "${pkg_config_flags}${pkg_config_error}")
  endif()
  message(STATUS "pkg-config --cflags --libs petra: ${pkg_config_flags}")
  separate_arguments(pkg_config_flags UNIX_COMMAND "${pkg_config_flags}")
  file(MAKE_DIRECTORY ${WORK_DIR}/pkg-config)
  run_step("build the consumer with pkg-config"
    ${CXX_COMPILER} -std=c++20 ${consumer_source}/main.cpp ${pkg_config_flags} -o ${WORK_DIR}/pkg-config/consumer)
  run_step("run the consumer built with pkg-config" ${WORK_DIR}/pkg-config/consumer)
endif()

if(COMPONENT STREQUAL "core")
  execute_process(
    COMMAND ${CMAKE_COMMAND} -S ${consumer_source} -B ${WORK_DIR}/package-data -G ${GENERATOR}
      -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DPETRA_COMPONENT=data ${without_data}
      -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DPETRA_CONSUME=package
    RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
  if(result EQUAL 0 OR NOT output MATCHES "xtensor")
    message(FATAL_ERROR "the data component was found although xtensor and zlib were made unfindable:\n${output}")
  endif()
  message(STATUS "the data component is refused without xtensor: ok")
endif()

# 3. add_subdirectory of the source tree: petra is then not the top-level
# project, so its tests, benchmarks and examples stay off. A consumer of
# core alone turns the data component off.
set(subdirectory_options)
if(COMPONENT STREQUAL "core")
  set(subdirectory_options -DPETRA_DATA=OFF)
endif()
run_step("configure the ${COMPONENT} consumer with add_subdirectory"
  ${CMAKE_COMMAND} -S ${consumer_source} -B ${WORK_DIR}/subdirectory ${consumer_options} ${subdirectory_options}
    -DPETRA_CONSUME=subdirectory -DPETRA_SOURCE_DIR=${PETRA_SOURCE_DIR})
run_step("build the ${COMPONENT} consumer with add_subdirectory" ${CMAKE_COMMAND} --build ${WORK_DIR}/subdirectory)
run_step("run the ${COMPONENT} consumer with add_subdirectory" ${WORK_DIR}/subdirectory/consumer)
