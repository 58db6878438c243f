# attention.cmake — the fused attention (model.attention: fused) in training,
# against the materialised one on one rank (tests/e2e/grid_invariance.sh: the
# reference grid runs materialized, the grid under test fused): context
# parallelism with grouped-query heads (LLaMA, cp 2: the kernel's positions),
# tensor parallelism with sequence parallelism, a 2-stage pipeline, and bf16
# at dp 2 × ZeRO-1 (bf16 bounds of precision.cmake). The kernels themselves:
# `flash` (kernels.cmake); against the PyTorch oracle: reference_*_fused
# (reference.cmake).
set(TD_FUSED --run-set model.attention=fused)
td_add_grid_test(NAME fused_llama_cp2 LABELS attention context_parallel llama
  ARGS ${TD_FUSED} --deck ${PROJECT_SOURCE_DIR}/inputs/llama-tiny.yaml
       ${TD_GRID_BIN} ${CMAKE_CURRENT_BINARY_DIR}/llama_grid fused_llama_cp2 ${TD_GRID_REF}
       1,1,1,0,0,2)
td_add_grid_test(NAME fused_gpt2_tp2_sp LABELS attention tensor_parallel
  ARGS ${TD_FUSED} --run-set parallel.sequence_parallel=true
       ${TD_GRID_BIN} ${TD_GRID_WORK} fused_gpt2_tp2_sp ${TD_GRID_REF} 1,2,1,0)
td_add_grid_test(NAME fused_gpt2_pp2 LABELS attention pipeline
  ARGS ${TD_FUSED} ${TD_GRID_BIN} ${TD_GRID_WORK} fused_gpt2_pp2 ${TD_GRID_REF} 1,1,2,0,1)
td_add_grid_test(NAME fused_llama_bf16_dp2 LABELS attention precision llama
  ARGS ${TD_FUSED} --deck ${PROJECT_SOURCE_DIR}/inputs/llama-tiny.yaml
       --loss-rtol 1e-3 --norm-rtol 1e-2 --param-rtol 5e-2
       ${TD_GRID_BIN} ${CMAKE_CURRENT_BINARY_DIR}/llama_grid fused_llama_bf16_dp2 ${TD_GRID_REF}
       2,1,1,1 --set training.precision=bf16)
