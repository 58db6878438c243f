# data.cmake — the data layer: td_h5 helpers, td_prepare, dataset readers,
# the grid-invariant sampler (io/). One process; temporary files go under the
# build tree.
td_add_unit(test_data ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_data.c)
add_test(NAME data COMMAND test_data ${CMAKE_CURRENT_BINARY_DIR}/data_tmp)
set_tests_properties(data PROPERTIES TIMEOUT 120 LABELS "unit;data"
  ENVIRONMENT "OMP_NUM_THREADS=1;HWLOC_PLUGINS_BLACKLIST=hwloc_pci")
