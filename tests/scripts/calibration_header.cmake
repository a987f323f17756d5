# scripts/calibrate's chain, briefly: BENCHMARK (bench_blocks) times every
# run of the reference network's blocks as a stage (one iteration each,
# two repetitions: the figures are not the point), PYTHON turns the report
# into the calibration header (scripts/lib/calibration_header.py), and
# CXX compiles a unit that cuts the reference network on it; a report that
# lacks a run is refused with the sentence that says so. Fails when the
# benchmarks' names, the script and partition's stage costs drift apart.
foreach(variable BENCHMARK PYTHON SCRIPT CXX INCLUDE WORK_DIR)
  if(NOT DEFINED ${variable})
    message(FATAL_ERROR "calibration_header.cmake needs -D${variable}=...")
  endif()
endforeach()
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR}/generated/petra/calibration)
set(report ${WORK_DIR}/blocks.json)
execute_process(
  COMMAND ${BENCHMARK} --benchmark_filter=^blocks: --benchmark_min_time=0.001 --benchmark_repetitions=2
    --benchmark_report_aggregates_only=true --benchmark_out=${report} --benchmark_out_format=json
  RESULT_VARIABLE status OUTPUT_QUIET ERROR_VARIABLE errors)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${BENCHMARK} failed (${status}): ${errors}")
endif()

set(header ${WORK_DIR}/generated/petra/calibration/reference_network.hpp)
execute_process(COMMAND ${PYTHON} ${SCRIPT} ${report} OUTPUT_FILE ${header} RESULT_VARIABLE status
                ERROR_VARIABLE errors)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "calibration_header.py refused the report (${status}): ${errors}")
endif()
file(WRITE ${WORK_DIR}/cuts.cpp [=[
#include <petra/calibration/reference_network.hpp>
#include <petra/models/reference_network.hpp>
#include <petra/partition.hpp>

using net = petra::reference_network<>;
// Every run was measured: no stage of any cut costs nothing.
constexpr bool every_run_measured()
{
    for (std::size_t first = 0; first < net::block_count; ++first) {
        if (petra::calibration::reference_network.last_stage[first] == 0) return false;
        for (std::size_t last = first; last + 1 < net::block_count; ++last) {
            if (petra::calibration::reference_network.stage[first][last] == 0) return false;
        }
    }
    return true;
}
static_assert(every_run_measured());
static_assert(petra::valid_cuts<net>(petra::partition<net, 2>(petra::calibration::reference_network)));
static_assert(petra::valid_cuts<net>(petra::partition<net, 4>(petra::calibration::reference_network)));
static_assert(petra::valid_cuts<net>(petra::partition<net, 10>(petra::calibration::reference_network)));
]=])
execute_process(COMMAND ${CXX} -std=c++20 -fsyntax-only -I${WORK_DIR}/generated -I${INCLUDE} ${WORK_DIR}/cuts.cpp
                RESULT_VARIABLE status OUTPUT_VARIABLE output ERROR_VARIABLE output)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "the generated header does not cut the reference network (${status}):\n${output}")
endif()
message(STATUS "the generated header cuts the reference network")

# A report without one run (blocks 3 to 4) is refused.
file(READ ${report} text)
string(REGEX REPLACE "blocks:3-4/tick/" "blocks:3-4/gone/" text "${text}")
file(WRITE ${WORK_DIR}/incomplete.json "${text}")
execute_process(COMMAND ${PYTHON} ${SCRIPT} ${WORK_DIR}/incomplete.json RESULT_VARIABLE status
                OUTPUT_QUIET ERROR_VARIABLE errors)
if(status EQUAL 0 OR NOT errors MATCHES "lacks some run of blocks' tick")
  message(FATAL_ERROR "a report without blocks 3 to 4 was not refused (${status}): ${errors}")
endif()
message(STATUS "a report without a run is refused")
