# The job's runs, one translation unit per group of methods
# (method_runs.hpp), compiled in parallel and once for both the job and its
# test: fashion_mnist_runs (threads and simulator), and with MPI
# fashion_mnist_mpi_runs (--driver mpi). Included by examples/ and tests/.
include_guard(GLOBAL)

find_package(nlohmann_json 3.10 REQUIRED)
find_package(MPI QUIET COMPONENTS CXX)

set(fashion_mnist_run_groups 4) # method_runs.hpp's run_groups
math(EXPR last_group "${fashion_mnist_run_groups} - 1")

# fashion_mnist_run_library(NAME SOURCE [libraries...]): a static library of
# SOURCE compiled once per group.
function(fashion_mnist_run_library name source)
  add_library(${name} STATIC)
  foreach(group RANGE 0 ${last_group})
    add_library(${name}_${group} OBJECT ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/${source})
    target_compile_definitions(${name}_${group} PRIVATE PETRA_JOB_RUN_GROUP=${group})
    target_link_libraries(${name}_${group} PRIVATE petra::petra petra_project_options nlohmann_json::nlohmann_json
      ${ARGN})
    target_sources(${name} PRIVATE $<TARGET_OBJECTS:${name}_${group}>)
  endforeach()
  target_link_libraries(${name} PUBLIC petra::petra nlohmann_json::nlohmann_json ${ARGN})
  target_include_directories(${name} PUBLIC ${CMAKE_CURRENT_FUNCTION_LIST_DIR})
endfunction()

fashion_mnist_run_library(fashion_mnist_runs method_runs.cpp)
if(MPI_CXX_FOUND)
  fashion_mnist_run_library(fashion_mnist_mpi_runs mpi_runs.cpp MPI::MPI_CXX)
endif()
