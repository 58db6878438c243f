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
# td_grid_twins(PREFIX ARGS <grid_invariance.sh options> GRIDS <name|grid|extra...>...):
# one grid test per grid: PREFIX_name runs the grid twice, with and without
# the options (an environment), and compares.
function(td_grid_twins prefix)
  cmake_parse_arguments(T "" "" "ARGS;GRIDS" ${ARGN})
  foreach(g ${T_GRIDS})
    string(REPLACE "|" ";" g "${g}")
    list(GET g 0 name)
    list(GET g 1 grid)
    set(extra "")
    list(LENGTH g len)
    if(len GREATER 2)
      list(SUBLIST g 2 -1 extra)
    endif()
    td_add_grid_test(NAME ${prefix}_${name} LABELS staging
      ARGS ${T_ARGS} ${TD_GRID_BIN} ${TD_GRID_WORK} ${prefix}_${name} ${grid} ${grid} ${extra})
  endforeach()
endfunction()

td_grid_twins(staged ARGS --bitwise --steps 10 --run-env TD_TEST_STAGED=1
  GRIDS "dp2_zero1|2,1,1,1|--set|training.global_batch=12"
        "dp2_zero3_bf16|2,1,1,3|--set|training.global_batch=12|--set|training.precision=bf16"
        "tp2|1,2,1,0"
        "pp2_1f1b_zero2|1,1,2,2,2|--set|training.global_batch=16"
        "212_zero0|2,1,2,0,2|--set|training.global_batch=16")

if(TARGET test_zero)
  td_add_mpi_test(NAME zero_staged COMMAND $<TARGET_FILE:test_zero> RANKS 2 TIMEOUT 120
    LABELS data_parallel staging)
  set_property(TEST zero_staged_np2 APPEND PROPERTY ENVIRONMENT TD_TEST_STAGED=1)
endif()

# Device collectives (kernels/td_dcomm.h): on a GPU the ZeRO engine, the
# tensor-parallel sums and the tied embedding's gradient go through NCCL
# communicators instead of host copies. TD_TEST_DCOMM=1 gives the CPU the
# contract's test implementation (parallel/dcomm_mpi.c: MPI's non-blocking
# collectives, completed only where the code joins them), so the code
# written for NCCL runs here:
#   - zero_dcomm: the engine's unit test, every stage and space, bit for bit,
#     its byte counters the same, on 1–4 ranks (uneven parts, empty parts);
#   - dcomm_*: the grids of staged_* and dp 2 ZeRO-2, (dp 2, tp 2) ZeRO-3,
#     with and without TD_TEST_DCOMM=1, bit-identical; the pipelines' messages
#     then go through the device channels (one communicator per direction of
#     each link, untagged: app/train/pipeline.c), under 1F1B, interleaved (the
#     wrapping link) and zb-h1 at pp 4.
if(TARGET test_zero)
  td_add_mpi_test(NAME zero_dcomm COMMAND $<TARGET_FILE:test_zero> RANKS 1 2 3 4 TIMEOUT 120
    LABELS data_parallel staging)
  foreach(np 1 2 3 4)
    set_property(TEST zero_dcomm_np${np} APPEND PROPERTY ENVIRONMENT TD_TEST_DCOMM=1)
  endforeach()
endif()
td_grid_twins(dcomm ARGS --bitwise --steps 10 --run-env TD_TEST_DCOMM=1
  GRIDS "dp2_zero1|2,1,1,1|--set|training.global_batch=12"
        "dp2_zero2|2,1,1,2|--set|training.global_batch=12"
        "dp2_zero3_bf16|2,1,1,3|--set|training.global_batch=12|--set|training.precision=bf16"
        "tp2|1,2,1,0"
        "pp2_1f1b_zero2|1,1,2,2,2|--set|training.global_batch=16"
        "212_zero0|2,1,2,0,2|--set|training.global_batch=16"
        "dp2_tp2_zero3|2,2,1,3|--set|training.global_batch=12"
        "pp2_interleaved|1,1,2,1,2|--set|training.global_batch=16|--set|parallel.pp_schedule=interleaved|--set|parallel.virtual_stages=2"
        "pp4_zbh1|1,1,4,3,1|--set|training.global_batch=8|--set|parallel.pp_schedule=zb-h1")

# The device collectives on their own (tests/unit/test_dcomm.c): every call,
# unequal and empty parts, in place, bf16, completion, counters. dcomm: the
# test implementation on the CPU; dcomm_nccl (label device): NCCL, one GPU
# per rank — 77 (skipped) without a GPU each, or in a build without NCCL.
td_add_unit(test_dcomm ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_dcomm.c)
td_add_mpi_test(NAME dcomm COMMAND $<TARGET_FILE:test_dcomm> cpu RANKS 1 2 3 4 TIMEOUT 60
  LABELS data_parallel staging)
if(TD_ENABLE_CUDA)
  td_add_mpi_test(NAME dcomm_nccl COMMAND $<TARGET_FILE:test_dcomm> cuda RANKS 1 2 TIMEOUT 120
    LABELS device)
  set_tests_properties(dcomm_nccl_np1 dcomm_nccl_np2 PROPERTIES SKIP_RETURN_CODE 77)
endif()
