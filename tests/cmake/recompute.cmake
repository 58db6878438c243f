# recompute.cmake — training.recompute: blocks (each block keeps its input and
# recomputes its activations in backward) must change memory, never numbers:
# the loss and grad_norm of every step and the final parameters bit-identical
# to training.recompute: none (grid_invariance.sh --bitwise), for both
# families, on one rank and on (dp 2, tp 1, pp 2) with 1F1B (several
# micro-batches in flight); each prints act_bytes without and with.
set(TD_RC --bitwise --run-set training.recompute=blocks)
td_add_grid_test(NAME recompute_gpt2_np1 LABELS recompute
  ARGS ${TD_RC} ${TD_GRID_BIN} ${TD_GRID_WORK} recompute_gpt2_np1 1,1,1,0 1,1,1,0)
td_add_grid_test(NAME recompute_gpt2_212 LABELS recompute
  ARGS ${TD_RC} ${TD_GRID_BIN} ${TD_GRID_WORK} recompute_gpt2_212 2,1,2,0,2 2,1,2,0,2
       --set training.global_batch=16)
td_add_grid_test(NAME recompute_llama_np1 LABELS recompute llama
  ARGS ${TD_RC} --deck ${PROJECT_SOURCE_DIR}/inputs/llama-tiny.yaml ${TD_GRID_BIN}
       ${CMAKE_CURRENT_BINARY_DIR}/llama_grid recompute_llama_np1 1,1,1,0 1,1,1,0)
td_add_grid_test(NAME recompute_llama_212 LABELS recompute llama
  ARGS ${TD_RC} --deck ${PROJECT_SOURCE_DIR}/inputs/llama-tiny.yaml ${TD_GRID_BIN}
       ${CMAKE_CURRENT_BINARY_DIR}/llama_grid recompute_llama_212 2,1,2,0,2 2,1,2,0,2
       --set training.global_batch=16)
td_add_grid_test(NAME recompute_llama_pp2_gpipe LABELS recompute llama
  ARGS ${TD_RC} --deck ${PROJECT_SOURCE_DIR}/inputs/llama-tiny.yaml ${TD_GRID_BIN}
       ${CMAKE_CURRENT_BINARY_DIR}/llama_grid recompute_llama_pp2_gpipe 1,1,2,0,2 1,1,2,0,2
       --set parallel.pp_schedule=gpipe)

# training.recompute: attention (selective recomputation, Korthikanti et al.
# 2022): every layer keeps all it kept but its attention probabilities
# (B, heads, T, T), recomputed before each attention backward from the kept
# Q, K — bit-identical to none, both families, one rank, (dp 2, pp 2) 1F1B
# and pp 2 zb-h1 (the recomputation inside B of a split backward). The
# materialized attention: the fused one keeps no probabilities to drop.
set(TD_RCA --bitwise --run-set training.recompute=attention)
set(TD_MAT --set model.attention=materialized)
td_add_grid_test(NAME recompute_attention_gpt2_np1 LABELS recompute
  ARGS ${TD_RCA} ${TD_GRID_BIN} ${TD_GRID_WORK} recompute_attention_gpt2_np1 1,1,1,0 1,1,1,0
       ${TD_MAT})
td_add_grid_test(NAME recompute_attention_gpt2_212 LABELS recompute
  ARGS ${TD_RCA} ${TD_GRID_BIN} ${TD_GRID_WORK} recompute_attention_gpt2_212 2,1,2,0,2 2,1,2,0,2
       --set training.global_batch=16 ${TD_MAT})
td_add_grid_test(NAME recompute_attention_llama_np1 LABELS recompute llama
  ARGS ${TD_RCA} --deck ${PROJECT_SOURCE_DIR}/inputs/llama-tiny.yaml ${TD_GRID_BIN}
       ${CMAKE_CURRENT_BINARY_DIR}/llama_grid recompute_attention_llama_np1 1,1,1,0 1,1,1,0
       ${TD_MAT})
td_add_grid_test(NAME recompute_attention_llama_zbh1 LABELS recompute llama
  ARGS ${TD_RCA} --deck ${PROJECT_SOURCE_DIR}/inputs/llama-tiny.yaml ${TD_GRID_BIN}
       ${CMAKE_CURRENT_BINARY_DIR}/llama_grid recompute_attention_llama_zbh1 1,1,2,1,2 1,1,2,1,2
       --set parallel.pp_schedule=zb-h1 --set training.precision=bf16 ${TD_MAT})
