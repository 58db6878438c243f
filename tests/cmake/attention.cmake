# attention.cmake — the fused attention (model.attention: fused) and the
# fused head (model.head: fused), the defaults, in training against the
# materialized kernels on one rank (tests/e2e/grid_invariance.sh: the
# reference grid runs materialized, the grid under test fused, its head in
# chunks of 40 rows — several per micro-batch, the last one short): context
# parallelism with grouped-query heads (LLaMA, cp 2: the kernel's
# positions), tensor parallelism with sequence parallelism (the head's rows
# gathered, the vocabulary's max and sums over tp per chunk), a vocabulary
# that does not divide tp (a padded last shard), a 2-stage pipeline with the
# tied head, zb-h1 with LLaMA's untied head (the head's weight gradient
# summed in B into W's stash), ZeRO-3 (the head gathered per chunk pass),
# and bf16 at dp 2 × ZeRO-1 (bf16 bounds of precision.cmake). The kernels
# themselves: `flash` (kernels.cmake); against the PyTorch oracle:
# reference_* (reference.cmake).
set(TD_FUSED --run-set model.attention=fused --run-set model.head=fused
             --run-set model.head_chunk=40)
set(TD_MAT --set model.attention=materialized --set model.head=materialized)
td_add_grid_test(NAME fused_llama_cp2 LABELS attention context_parallel llama
  ARGS ${TD_FUSED} --deck ${PROJECT_SOURCE_DIR}/inputs/llama-tiny.yaml
       ${TD_GRID_BIN} ${CMAKE_CURRENT_BINARY_DIR}/llama_grid fused_llama_cp2 ${TD_GRID_REF}
       1,1,1,0,0,2 ${TD_MAT})
td_add_grid_test(NAME fused_gpt2_tp2_sp LABELS attention tensor_parallel
  ARGS ${TD_FUSED} --run-set parallel.sequence_parallel=true
       ${TD_GRID_BIN} ${TD_GRID_WORK} fused_gpt2_tp2_sp ${TD_GRID_REF} 1,2,1,0 ${TD_MAT})
td_add_grid_test(NAME fused_gpt2_tp2_vocab250 LABELS attention tensor_parallel
  ARGS ${TD_FUSED} --vocab 250
       ${TD_GRID_BIN} ${TD_GRID_WORK} fused_gpt2_tp2_vocab250 ${TD_GRID_REF} 1,2,1,0 ${TD_MAT})
td_add_grid_test(NAME fused_gpt2_pp2 LABELS attention pipeline
  ARGS ${TD_FUSED} ${TD_GRID_BIN} ${TD_GRID_WORK} fused_gpt2_pp2 ${TD_GRID_REF} 1,1,2,0,1
       ${TD_MAT})
td_add_grid_test(NAME fused_llama_pp2_zbh1 LABELS attention pipeline llama
  ARGS ${TD_FUSED} --run-set parallel.pp_schedule=zb-h1
       --deck ${PROJECT_SOURCE_DIR}/inputs/llama-tiny.yaml
       ${TD_GRID_BIN} ${CMAKE_CURRENT_BINARY_DIR}/llama_grid fused_llama_pp2_zbh1 ${TD_GRID_REF}
       1,1,2,0,1 ${TD_MAT})
td_add_grid_test(NAME fused_gpt2_dp2_zero3 LABELS attention data_parallel
  ARGS ${TD_FUSED} ${TD_GRID_BIN} ${TD_GRID_WORK} fused_gpt2_dp2_zero3 ${TD_GRID_REF} 2,1,1,3
       ${TD_MAT})
td_add_grid_test(NAME fused_llama_bf16_dp2 LABELS attention precision llama
  ARGS ${TD_FUSED} --deck ${PROJECT_SOURCE_DIR}/inputs/llama-tiny.yaml
       --loss-rtol 1e-3 --norm-rtol 1e-2 --param-rtol 5e-2
       ${TD_GRID_BIN} ${CMAKE_CURRENT_BINARY_DIR}/llama_grid fused_llama_bf16_dp2 ${TD_GRID_REF}
       2,1,1,1 --set training.precision=bf16 ${TD_MAT})
