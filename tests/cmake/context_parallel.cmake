# context_parallel.cmake — parallel.cp (context parallelism): every sequence
# cut into 2·cp chunks, cp rank i holding chunks i and 2·cp − 1 − i; keys and
# values all-gathered over the cp group for attention, their gradients
# reduce-scattered; gradients and the loss summed over dp × cp.
#
# cp_*: grid invariance (tests/e2e/grid_invariance.sh; a grid's sixth field
# is cp) against one rank at the bounds of the other grids (fp32 1e-4 on
# loss and grad_norm every step; bf16 the tp bounds of precision.cmake):
# cp 2 and cp 4 for both families, cp 2 × tp 2 with sequence parallelism,
# dp 2 × cp 2 at ZeRO-3, cp 2 × pp 2 1F1B, the full (dp, cp, tp, pp) =
# (2, 2, 2, 1) at 8 ranks, bf16, and both recomputation modes.
# staged_cp2 / dcomm_cp2_bf16: the same grid without and with host staging
# and the device collectives' test implementation, bit-identical.
# checkpoint_reshard_cp*: a checkpoint saved at (dp 1, cp 2, tp 2) resumed
# at dp 2 and at one rank, and the reverse (tests/e2e/ckpt_reshard.sh).
# The bad decks (seq_len and 2·cp, the rank count) are in tests/decks/bad.
set(TD_CP_LLAMA --deck ${PROJECT_SOURCE_DIR}/inputs/llama-tiny.yaml)
set(TD_CP_LLAMA_WORK ${CMAKE_CURRENT_BINARY_DIR}/llama_grid)
set(TD_BF16_TOL --loss-rtol 1e-3 --norm-rtol 1e-2 --param-rtol 5e-2)

td_add_grid_test(NAME cp_gpt2_cp2 LABELS context_parallel
  ARGS ${TD_GRID_BIN} ${TD_GRID_WORK} cp_gpt2_cp2 ${TD_GRID_REF} 1,1,1,0,0,2)
td_add_grid_test(NAME cp_llama_cp2 LABELS context_parallel llama
  ARGS ${TD_CP_LLAMA} ${TD_GRID_BIN} ${TD_CP_LLAMA_WORK} cp_llama_cp2 ${TD_GRID_REF} 1,1,1,0,0,2)
td_add_grid_test(NAME cp_gpt2_cp4 LABELS context_parallel
  ARGS ${TD_GRID_BIN} ${TD_GRID_WORK} cp_gpt2_cp4 ${TD_GRID_REF} 1,1,1,0,0,4)
td_add_grid_test(NAME cp_llama_cp4 LABELS context_parallel llama
  ARGS ${TD_CP_LLAMA} ${TD_GRID_BIN} ${TD_CP_LLAMA_WORK} cp_llama_cp4 ${TD_GRID_REF} 1,1,1,0,0,4)
td_add_grid_test(NAME cp_gpt2_cp2_tp2_sp LABELS context_parallel tensor_parallel
  ARGS --run-set parallel.sequence_parallel=true
       ${TD_GRID_BIN} ${TD_GRID_WORK} cp_gpt2_cp2_tp2_sp ${TD_GRID_REF} 1,2,1,0,0,2)
td_add_grid_test(NAME cp_llama_cp2_tp2_sp LABELS context_parallel tensor_parallel llama
  ARGS --run-set parallel.sequence_parallel=true ${TD_CP_LLAMA}
       ${TD_GRID_BIN} ${TD_CP_LLAMA_WORK} cp_llama_cp2_tp2_sp ${TD_GRID_REF} 1,2,1,0,0,2)
td_add_grid_test(NAME cp_llama_dp2_cp2_zero3 LABELS context_parallel llama
  ARGS ${TD_CP_LLAMA} ${TD_GRID_BIN} ${TD_CP_LLAMA_WORK} cp_llama_dp2_cp2_zero3
       ${TD_GRID_REF} 2,1,1,3,0,2)
td_add_grid_test(NAME cp_gpt2_cp2_pp2_1f1b LABELS context_parallel pipeline
  ARGS ${TD_GRID_BIN} ${TD_GRID_WORK} cp_gpt2_cp2_pp2_1f1b ${TD_GRID_REF} 1,1,2,1,2,2)
td_add_grid_test(NAME cp_gpt2_2221 LABELS context_parallel tensor_parallel TIMEOUT 400
  ARGS --run-set parallel.sequence_parallel=true
       ${TD_GRID_BIN} ${TD_GRID_WORK} cp_gpt2_2221 ${TD_GRID_REF} 2,2,1,1,0,2)
td_add_grid_test(NAME cp_gpt2_cp2_bf16 LABELS context_parallel precision
  ARGS ${TD_BF16_TOL} ${TD_GRID_BIN} ${TD_GRID_WORK} cp_gpt2_cp2_bf16 ${TD_GRID_REF} 1,1,1,0,0,2
       --set training.precision=bf16)
td_add_grid_test(NAME cp_llama_cp2_recompute_attention LABELS context_parallel recompute llama
  ARGS --run-set training.recompute=attention ${TD_CP_LLAMA}
       ${TD_GRID_BIN} ${TD_CP_LLAMA_WORK} cp_llama_cp2_recompute_attention ${TD_GRID_REF}
       1,1,1,0,0,2 --set model.attention=materialized)
td_add_grid_test(NAME cp_gpt2_cp2_recompute_blocks LABELS context_parallel recompute
  ARGS --run-set training.recompute=blocks
       ${TD_GRID_BIN} ${TD_GRID_WORK} cp_gpt2_cp2_recompute_blocks ${TD_GRID_REF} 1,1,1,0,2,2)

td_add_grid_test(NAME staged_cp2 LABELS context_parallel staging
  ARGS --bitwise --steps 10 --run-env TD_TEST_STAGED=1
       ${TD_GRID_BIN} ${TD_GRID_WORK} staged_cp2 1,1,1,0,0,2 1,1,1,0,0,2)
td_add_grid_test(NAME dcomm_cp2_bf16 LABELS context_parallel staging llama
  ARGS --bitwise --steps 10 --run-env TD_TEST_DCOMM=1 ${TD_CP_LLAMA}
       ${TD_GRID_BIN} ${TD_CP_LLAMA_WORK} dcomm_cp2_bf16 1,1,1,0,0,2 1,1,1,0,0,2
       --set training.precision=bf16)

td_add_ckpt_test(NAME checkpoint_reshard_cp2tp2_to_dp2 SCRIPT ckpt_reshard.sh TIMEOUT 450
  ARGS reshard_cp2tp2_to_dp2 1,2,1,0,0,2 2,1,1,0)
td_add_ckpt_test(NAME checkpoint_reshard_cp2tp2_to_1 SCRIPT ckpt_reshard.sh TIMEOUT 450
  ARGS reshard_cp2tp2_to_1 1,2,1,0,0,2 1,1,1,0)
td_add_ckpt_test(NAME checkpoint_reshard_dp2_to_cp2tp2 SCRIPT ckpt_reshard.sh TIMEOUT 450
  ARGS reshard_dp2_to_cp2tp2 2,1,1,0 1,2,1,0,0,2)
td_add_ckpt_test(NAME checkpoint_reshard_1_to_cp2tp2 SCRIPT ckpt_reshard.sh TIMEOUT 450
  ARGS reshard_1_to_cp2tp2 1,1,1,0 1,2,1,0,0,2)

# Memory at T = 4096 (tests/e2e/cp_memory.sh): activation bytes per rank at
# cp 4 at most 0.35 of cp 1's; the measured peak RSS within 10% of check.
add_test(NAME cp_memory
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e/cp_memory.sh $<TARGET_FILE:trident>
          ${CMAKE_CURRENT_BINARY_DIR}/cp_memory
  WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(cp_memory PROPERTIES TIMEOUT 600 PROCESSORS 2
  LABELS "context_parallel;e2e;mpi" ENVIRONMENT "${TD_GRID_ENV}")

# llama_long_check: inputs/llama-8b-32k.yaml (Llama 3 8B's shape on 32,768-
# token sequences, dp 1 × cp 4 × tp 8 × pp 2 = 64 GPUs) passes `trident
# check` on one process, as on a login node: a virtual grid of its 64 ranks
# (64 oversubscribed processes took minutes on 2 cores; good_decks compares
# the virtual grid with real ones), each cp rank with 8192 tokens of every
# sequence. (Any readable file stands in for the deck's dataset.)
add_test(NAME llama_long_check
  COMMAND ${MPIEXEC_EXECUTABLE} -n 1 $<TARGET_FILE:trident> check
          ${PROJECT_SOURCE_DIR}/inputs/llama-8b-32k.yaml
          --set data.train=${PROJECT_SOURCE_DIR}/inputs/llama-8b-32k.yaml)
set_tests_properties(llama_long_check PROPERTIES TIMEOUT 300 PROCESSORS 2
  LABELS "e2e;mpi;llama;context_parallel" ENVIRONMENT "${TD_GRID_ENV}"
  PASS_REGULAR_EXPRESSION
  "virtual grid: this job has 1 process, the deck 64 ranks.*context parallel: each cp rank holds 8192 of every sequence's 32768 tokens.*parameters: 8030261248 .*check: OK")
