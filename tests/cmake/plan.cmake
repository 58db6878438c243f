# trident plan: the published runs from the shipped cluster files (and the
# tables of them in the README and docs/plan.md), and the planner's
# communication bytes equal to the metrics' on small grids.
add_test(NAME plan_published
  COMMAND ${TD_PY} ${CMAKE_CURRENT_SOURCE_DIR}/plan/published.py $<TARGET_FILE:trident>
          --check-doc ${PROJECT_SOURCE_DIR}/README.md ${PROJECT_SOURCE_DIR}/docs/plan.md)
set_tests_properties(plan_published PROPERTIES TIMEOUT 120 LABELS "plan")
# plan_validation: 26 published runs from 6 sources the model was not built
# from, each as its system ran it (tests/plan/validation.py); the table in
# docs/plan.md must be what the planner predicts.
add_test(NAME plan_validation
  COMMAND ${TD_PY} ${CMAKE_CURRENT_SOURCE_DIR}/plan/validation.py $<TARGET_FILE:trident>
          --check-doc ${PROJECT_SOURCE_DIR}/docs/plan.md)
set_tests_properties(plan_validation PROPERTIES TIMEOUT 120 LABELS "plan")
add_test(NAME plan_comm_bytes
  COMMAND ${TD_PY} ${CMAKE_CURRENT_SOURCE_DIR}/plan/comm_bytes.py $<TARGET_FILE:trident>
          ${MPIEXEC_EXECUTABLE} ${CMAKE_CURRENT_BINARY_DIR}/plan_comm_bytes)
set_tests_properties(plan_comm_bytes PROPERTIES TIMEOUT 600 PROCESSORS 2 LABELS "plan;mpi"
  ENVIRONMENT "HWLOC_PLUGINS_BLACKLIST=hwloc_pci")
# plan_local: the planner against this machine — calibrate, train 5
# configurations of the small deck at 2 ranks (one of each kind, ≥ 10% apart)
# in 2 rounds, predict them from the least disturbed calibration: median
# step-time error ≤ 20%, of the pairs ≥ 20% apart in measured time at least
# 80% in the planner's order, peak memory within 10%. The full table (12
# configurations) is tests/bench/plan_bench.sh.
add_test(NAME plan_local
  COMMAND ${TD_PY} ${CMAKE_CURRENT_SOURCE_DIR}/bench/plan_bench.py $<TARGET_FILE:trident>
          ${MPIEXEC_EXECUTABLE} ${CMAKE_CURRENT_BINARY_DIR}/plan_local --reduced --rounds 2
          --steps 6 --check 0.20 0.8 0.10)
# It times the machine: nothing runs beside it.
set_tests_properties(plan_local PROPERTIES TIMEOUT 600 PROCESSORS 2 RUN_SERIAL TRUE LABELS "plan;mpi"
  ENVIRONMENT "HWLOC_PLUGINS_BLACKLIST=hwloc_pci")
