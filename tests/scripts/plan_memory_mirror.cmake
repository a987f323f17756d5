# Runs BENCHMARK (bench_plan_reference) briefly into REPORT, then
# `PYTHON PLAN REPORT --check-memory`, which fails unless scripts/plan's
# memory per stage equals memory_plan's figures in the report to the byte.
foreach(variable BENCHMARK PYTHON PLAN REPORT)
  if(NOT DEFINED ${variable})
    message(FATAL_ERROR "plan_memory_mirror.cmake needs -D${variable}=...")
  endif()
endforeach()
execute_process(
  COMMAND ${BENCHMARK} --benchmark_filter=^block:9/forward/ --benchmark_min_time=0.001
    --benchmark_out=${REPORT} --benchmark_out_format=json
  RESULT_VARIABLE status OUTPUT_QUIET)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${BENCHMARK} failed (${status})")
endif()
execute_process(COMMAND ${PYTHON} ${PLAN} ${REPORT} --check-memory RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "scripts/plan's memory mirror differs from memory_plan (above)")
endif()
