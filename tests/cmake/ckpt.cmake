# ckpt.cmake — parallel-HDF5 checkpoints (io/td_ckpt.h): a round trip between
# decompositions, checksums, commit/keep/abort, resume resolution and errors
# at 1-4 ranks (files under ckpt_tmp/np<K>), and a save killed half-way.
td_add_unit(test_ckpt ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_ckpt.c)
td_add_mpi_test(NAME ckpt COMMAND $<TARGET_FILE:test_ckpt> ${CMAKE_CURRENT_BINARY_DIR}/ckpt_tmp
  RANKS 1 2 3 4 TIMEOUT 120 LABELS ckpt)

add_test(NAME ckpt_crash
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/unit/ckpt_crash.sh ${MPIEXEC_EXECUTABLE}
          $<TARGET_FILE:test_ckpt> ${CMAKE_CURRENT_BINARY_DIR}/ckpt_tmp/crash)
set_tests_properties(ckpt_crash PROPERTIES TIMEOUT 120 PROCESSORS 2
  LABELS "mpi;ckpt"
  ENVIRONMENT "OMP_NUM_THREADS=1;HWLOC_PLUGINS_BLACKLIST=hwloc_pci")

# Save/load bandwidth with GPT-2 124M shapes beside dd (not a test):
#   mpiexec -n K tests/ckpt_bench DIR [LAYERS] [REPEATS]
td_add_unit(ckpt_bench ${CMAKE_CURRENT_SOURCE_DIR}/bench/ckpt_bench.c)
# The fixed cost of a save (an empty checkpoint) and of one reduction at K
# ranks, printed beside tests/bench/ckpt_bench.sh's table (not a test):
#   mpiexec -n K tests/ckpt_floor DIR [REPEATS]
td_add_unit(ckpt_floor ${CMAKE_CURRENT_SOURCE_DIR}/bench/ckpt_floor.c)
