# trident plan: the published runs from the shipped cluster files, and the
# planner's communication bytes equal to the metrics' on small grids.
add_test(NAME plan_published
  COMMAND ${TD_PY} ${CMAKE_CURRENT_SOURCE_DIR}/plan/published.py $<TARGET_FILE:trident>)
set_tests_properties(plan_published PROPERTIES TIMEOUT 120 LABELS "plan")
add_test(NAME plan_comm_bytes
  COMMAND ${TD_PY} ${CMAKE_CURRENT_SOURCE_DIR}/plan/comm_bytes.py $<TARGET_FILE:trident>
          ${MPIEXEC_EXECUTABLE} ${CMAKE_CURRENT_BINARY_DIR}/plan_comm_bytes)
set_tests_properties(plan_comm_bytes PROPERTIES TIMEOUT 600 PROCESSORS 2 LABELS "plan;mpi"
  ENVIRONMENT "HWLOC_PLUGINS_BLACKLIST=hwloc_pci")
# Predicted vs measured on this machine is tests/bench/plan_bench.sh (the
# full table in docs/benchmarks.md): it does not meet its goals yet
# (docs/plan.md names the terms), so it is a benchmark, not a CTest.
