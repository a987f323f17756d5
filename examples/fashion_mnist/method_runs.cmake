# The job's runs (method_runs.hpp) as the static library fashion_mnist_runs:
# method_runs.cpp compiled once per network and group of stage counts, the
# groups in parallel, once for both the job and its test. With MPI (OpenMPI's
# libopenmpi-dev) the runs include PETRA on MPI ranks (--driver mpi), and
# the library brings MPI and PETRA_JOB_WITH_MPI to whoever links it.
# Included by examples/ and tests/.
include_guard(GLOBAL)

find_package(nlohmann_json 3.10 REQUIRED)
find_package(MPI QUIET COMPONENTS CXX)

set(fashion_mnist_run_groups 2) # method_runs.hpp's run_groups
math(EXPR last_group "${fashion_mnist_run_groups} - 1")
set(fashion_mnist_run_dependencies petra::petra nlohmann_json::nlohmann_json)
if(MPI_CXX_FOUND)
  list(APPEND fashion_mnist_run_dependencies MPI::MPI_CXX)
else()
  message(STATUS "petra: MPI not found; fashion_mnist is built without --driver mpi")
endif()

add_library(fashion_mnist_runs STATIC)
foreach(network reference reversible) # options.hpp's network_kind
  foreach(group RANGE 0 ${last_group})
    set(unit fashion_mnist_runs_${network}_${group})
    add_library(${unit} OBJECT ${CMAKE_CURRENT_LIST_DIR}/method_runs.cpp)
    target_compile_definitions(${unit} PRIVATE PETRA_JOB_NETWORK=${network} PETRA_JOB_RUN_GROUP=${group}
      $<$<BOOL:${MPI_CXX_FOUND}>:PETRA_JOB_WITH_MPI>)
    target_link_libraries(${unit} PRIVATE ${fashion_mnist_run_dependencies} petra_project_options)
    target_sources(fashion_mnist_runs PRIVATE $<TARGET_OBJECTS:${unit}>)
  endforeach()
endforeach()
target_link_libraries(fashion_mnist_runs PUBLIC ${fashion_mnist_run_dependencies})
target_include_directories(fashion_mnist_runs PUBLIC ${CMAKE_CURRENT_LIST_DIR})
if(MPI_CXX_FOUND)
  target_compile_definitions(fashion_mnist_runs PUBLIC PETRA_JOB_WITH_MPI)
endif()
