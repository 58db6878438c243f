# data_parallel.cmake — data parallelism and ZeRO stages 0–3 against grid
# invariance (docs/architecture.md invariant 1), through the command line: the tiny deck
# for 20 steps with global batch 12 (divisible by 1, 2, 3 and 4 ranks) at dp
# = 2, 3, 4 for each ZeRO stage against the single-rank run (losses 1e-4
# relative at every step, final parameters 1e-5 of max |p|); the same grid
# twice bit for bit; gradient accumulation (dp 2, micro-batch 2, 4 steps)
# against (dp 1, micro-batch 16).
set(G12 --set training.global_batch=12)
foreach(zero 0 1 2 3)
  foreach(dp 2 3 4)
    td_add_grid_test(NAME dp_grid_dp${dp}_zero${zero} LABELS data_parallel
      ARGS ${TD_GRID_BIN} ${TD_GRID_WORK} dp_grid_dp${dp}_zero${zero} ${TD_GRID_REF} ${dp},1,1,${zero} ${G12})
  endforeach()
  td_add_grid_test(NAME dp_twice_dp2_zero${zero} LABELS data_parallel
    ARGS --twice ${TD_GRID_BIN} ${TD_GRID_WORK} dp_twice_dp2_zero${zero} 2,1,1,${zero} ${G12})
endforeach()
td_add_grid_test(NAME dp_accum_dp2_mb2 LABELS data_parallel
  ARGS ${TD_GRID_BIN} ${TD_GRID_WORK} dp_accum_dp2_mb2 1,1,1,0,16 2,1,1,0,2 --set training.global_batch=16)

# The collective layer and the ZeRO engine on their own, at 1–8 ranks.
if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_zero.c)
  td_add_unit(test_zero ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_zero.c)
  td_add_mpi_test(NAME zero COMMAND $<TARGET_FILE:test_zero> RANKS 1 2 3 4 8 TIMEOUT 120
    LABELS data_parallel)
endif()

# parallel.overlap_param_gather (ZeRO 1-2: the updated parameters gathered
# unit by unit while the next forward runs) against the gather right after
# the optimizer: bit-identical losses, grad norms and parameters, fp32 and
# bf16, with a pipeline and the zero-bubble schedule.
td_add_grid_test(NAME dp_overlap_gather_zero1 LABELS data_parallel
  ARGS --bitwise --run-set parallel.overlap_param_gather=false ${TD_GRID_BIN} ${TD_GRID_WORK}
       dp_overlap_gather_zero1 2,1,1,1 2,1,1,1 ${G12})
td_add_grid_test(NAME dp_overlap_gather_zero2_bf16_pp LABELS data_parallel
  ARGS --bitwise --run-set parallel.overlap_param_gather=false ${TD_GRID_BIN} ${TD_GRID_WORK}
       dp_overlap_gather_zero2_bf16_pp 2,1,2,2 2,1,2,2 ${G12} --set training.precision=bf16
       --set parallel.pp_schedule=zb-h1)
td_add_grid_test(NAME dp_overlap_gather_zero1_interleaved LABELS data_parallel
  ARGS --bitwise --run-set parallel.overlap_param_gather=false ${TD_GRID_BIN} ${TD_GRID_WORK}
       dp_overlap_gather_zero1_interleaved 2,1,2,1,1 2,1,2,1,1 ${G12} --set training.precision=bf16
       --set parallel.pp_schedule=interleaved --set parallel.virtual_stages=2)
