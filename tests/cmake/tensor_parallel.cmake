# tensor_parallel.cmake — tensor parallelism against docs/architecture.md invariant 1
# (grid invariance), through the command line, plus the vocabulary-parallel
# cross-entropy on its own.
#
# tp_grid_*: tests/e2e/grid_invariance.sh trains the tiny deck 20 steps at the
# reference grid (1,1,1,0) — run once and shared through a cached, flock'ed
# reference in ${TD_GRID_WORK} — and at the grid under test, then compares loss
# curves (rtol 1e-4) and, once checkpoints are written, the final /model
# tensors (1e-5 of max|p|). Grids are "dp,tp,pp,zero[,micro_batch]".
# tp_twice_tp2 runs tp=2 twice and demands bit-identical results.
# A grid that trident refuses ("not implemented yet", exit 3) FAILS: the
# combinations registered here are the ones trident must support.
# tp_vocab250_tp4: vocabulary 250 on tp=4 (shards of 63, the last 61 real),
# on a corpus whose tokens are all < 128.
td_add_grid_test(NAME tp_grid_tp2 LABELS tensor_parallel ARGS ${TD_GRID_BIN} ${TD_GRID_WORK} tp_grid_tp2 ${TD_GRID_REF} 1,2,1,0)
td_add_grid_test(NAME tp_grid_tp4 LABELS tensor_parallel ARGS ${TD_GRID_BIN} ${TD_GRID_WORK} tp_grid_tp4 ${TD_GRID_REF} 1,4,1,0)
td_add_grid_test(NAME tp_grid_dp2_tp2 LABELS tensor_parallel ARGS ${TD_GRID_BIN} ${TD_GRID_WORK} tp_grid_dp2_tp2 ${TD_GRID_REF} 2,2,1,0)
# tp with gradient accumulation: micro-batch 2 of the global batch 8
td_add_grid_test(NAME tp_grid_tp2_mb2 LABELS tensor_parallel ARGS ${TD_GRID_BIN} ${TD_GRID_WORK} tp_grid_tp2_mb2 ${TD_GRID_REF} 1,2,1,0,2)
# ZeRO-3 under tensor parallelism: must train (a refusal fails the test)
td_add_grid_test(NAME tp_grid_dp2_tp2_zero3 LABELS tensor_parallel ARGS ${TD_GRID_BIN} ${TD_GRID_WORK} tp_grid_dp2_tp2_zero3 ${TD_GRID_REF} 2,2,1,3)
td_add_grid_test(NAME tp_twice_tp2 LABELS tensor_parallel ARGS --twice ${TD_GRID_BIN} ${TD_GRID_WORK} tp_twice_tp2 1,2,1,0)
td_add_grid_test(NAME tp_vocab250_tp4 LABELS tensor_parallel ARGS --vocab 250 ${TD_GRID_BIN} ${TD_GRID_WORK} tp_vocab250_tp4 ${TD_GRID_REF} 1,4,1,0)

# The vocabulary-parallel cross-entropy kernels + all-reduces vs float64.
td_add_unit(test_vocab_xent ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_vocab_xent.c)
td_add_mpi_test(NAME vocab_xent COMMAND $<TARGET_FILE:test_vocab_xent> RANKS 1 2 3 4 TIMEOUT 60
  LABELS tensor_parallel)
