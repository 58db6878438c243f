# robustness_compare.cmake — the comparison behind every grid test
# (tests/e2e/compare_runs.py) tested on a real pair of runs (tiny deck, dp 1
# and dp 2, through the command line): the real pair passes; grad_norm x 1.5,
# a small tensor off by 1e-3 of its own max and the attention key bias beyond
# its absolute bound fail; the key bias within the bound passes
# (issue 12, defect 4).
add_test(NAME compare_runs_selftest
  COMMAND ${TD_PY} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/compare_runs_selftest.py $<TARGET_FILE:trident>
          ${CMAKE_CURRENT_BINARY_DIR}/compare_runs_selftest)
set_tests_properties(compare_runs_selftest PROPERTIES TIMEOUT 300 PROCESSORS 2
  LABELS "robustness;e2e;mpi" ENVIRONMENT "${TD_GRID_ENV}")
