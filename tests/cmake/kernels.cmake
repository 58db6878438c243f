# kernels — the CPU back-end against float64 references and finite differences.
td_add_unit(test_kernels ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_kernels.c)
add_test(NAME kernels COMMAND test_kernels)
set_tests_properties(kernels PROPERTIES TIMEOUT 60 PROCESSORS 2 LABELS "unit;kernels"
  ENVIRONMENT "OMP_NUM_THREADS=2")
