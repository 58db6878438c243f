# staging.cmake — MPI on a back-end whose memory is not host memory (a GPU):
# every MPI call then works on host copies (k->to_host before MPI reads,
# k->to_device once the request completed), which must change nothing.
# Without a GPU, TD_TEST_STAGED=1 makes the CPU back-end report
# host_memory = 0 (copies stay memcpy), so the staging paths run here:
#   - staged_*: the tiny deck through the command line (10 steps), the same
#     grid without and with TD_TEST_STAGED=1 (grid_invariance.sh --bitwise
#     --run-env), losses, grad norms and final parameters bit-identical:
#     ZeRO-1 (reduce-scatter into the shard, parameter all-gather) and ZeRO-3
#     in bf16 (uint16 gathers, slot reduce-scatters) at dp 2, tp 2 (the
#     activation sums and the cross-entropy statistics), pp 2 with 1F1B and
#     ZeRO-2 (stage messages, the tied wte's gradient over embed_comm every
#     micro-batch), and (dp 2, pp 2) at ZeRO-0 on 4 ranks (bucket all-reduces,
#     both at once);
#   - zero_staged: the ZeRO engine's unit test (tests/unit/test_zero.c) with
#     staging, every stage, bit for bit, its memory counting the copies.
set(TD_STAGED --bitwise --steps 10 --run-env TD_TEST_STAGED=1)
foreach(g "dp2_zero1;2,1,1,1;--set;training.global_batch=12"
          "dp2_zero3_bf16;2,1,1,3;--set;training.global_batch=12;--set;training.precision=bf16"
          "tp2;1,2,1,0"
          "pp2_1f1b_zero2;1,1,2,2,2;--set;training.global_batch=16"
          "212_zero0;2,1,2,0,2;--set;training.global_batch=16")
  list(GET g 0 name)
  list(GET g 1 grid)
  set(extra "")
  list(LENGTH g len)
  if(len GREATER 2)
    list(SUBLIST g 2 -1 extra)
  endif()
  td_add_grid_test(NAME staged_${name} LABELS staging
    ARGS ${TD_STAGED} ${TD_GRID_BIN} ${TD_GRID_WORK} staged_${name} ${grid} ${grid} ${extra})
endforeach()

if(TARGET test_zero)
  td_add_mpi_test(NAME zero_staged COMMAND $<TARGET_FILE:test_zero> RANKS 2 TIMEOUT 120
    LABELS data_parallel staging)
  set_property(TEST zero_staged_np2 APPEND PROPERTY ENVIRONMENT TD_TEST_STAGED=1)
endif()
