# Training against the PyTorch oracle (tests/reference/), through the CLI.
add_test(NAME reference_train
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/e2e/reference_train.sh $<TARGET_FILE:trident>
          ${CMAKE_CURRENT_BINARY_DIR}/reference_train)
set_tests_properties(reference_train PROPERTIES TIMEOUT 300 PROCESSORS 2 LABELS "reference")
# The LLaMA family (inputs/llama-tiny.yaml: GQA 4 heads / 2 kv-heads, SwiGLU
# 352, RoPE, untied head) against tests/reference/llama_ref.py at the same
# bounds; llama_ref.py's own self-check (a loop-by-loop numpy forward) first.
add_test(NAME reference_llama_selfcheck
  COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/reference/llama_ref.py)
set_tests_properties(reference_llama_selfcheck PROPERTIES TIMEOUT 120 LABELS "reference;llama")
add_test(NAME reference_llama
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/e2e/reference_train.sh $<TARGET_FILE:trident>
          ${CMAKE_CURRENT_BINARY_DIR}/reference_llama ${PROJECT_SOURCE_DIR}/inputs/llama-tiny.yaml)
set_tests_properties(reference_llama PROPERTIES TIMEOUT 300 PROCESSORS 2 LABELS "reference;llama")
# The defaults above are the fused attention and the fused head; here the
# fused kernels at a sequence length of several attention tiles, not a
# multiple of one (150: 64 + 64 + 22 rows; LLaMA 130 with grouped-query
# heads), the head in chunks of 97 rows (B·T = 1200 and 1040: a short last
# chunk), and the materialized attention and head (the reference kernels)
# against the same oracles.
add_test(NAME reference_train_fused
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/e2e/reference_train.sh $<TARGET_FILE:trident>
          ${CMAKE_CURRENT_BINARY_DIR}/reference_train_fused ${PROJECT_SOURCE_DIR}/inputs/tiny.yaml
          --set model.seq_len=150 --set model.head_chunk=97 --set training.steps=8)
set_tests_properties(reference_train_fused PROPERTIES TIMEOUT 300 PROCESSORS 2 LABELS "reference")
add_test(NAME reference_llama_fused
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/e2e/reference_train.sh $<TARGET_FILE:trident>
          ${CMAKE_CURRENT_BINARY_DIR}/reference_llama_fused ${PROJECT_SOURCE_DIR}/inputs/llama-tiny.yaml
          --set model.seq_len=130 --set model.head_chunk=97 --set training.steps=8)
set_tests_properties(reference_llama_fused PROPERTIES TIMEOUT 300 PROCESSORS 2 LABELS "reference;llama")
add_test(NAME reference_train_materialized
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/e2e/reference_train.sh $<TARGET_FILE:trident>
          ${CMAKE_CURRENT_BINARY_DIR}/reference_train_materialized ${PROJECT_SOURCE_DIR}/inputs/tiny.yaml
          --set model.attention=materialized --set model.head=materialized --set training.steps=8)
set_tests_properties(reference_train_materialized PROPERTIES TIMEOUT 300 PROCESSORS 2 LABELS "reference")
add_test(NAME reference_llama_materialized
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/e2e/reference_train.sh $<TARGET_FILE:trident>
          ${CMAKE_CURRENT_BINARY_DIR}/reference_llama_materialized ${PROJECT_SOURCE_DIR}/inputs/llama-tiny.yaml
          --set model.attention=materialized --set model.head=materialized --set training.steps=8)
set_tests_properties(reference_llama_materialized PROPERTIES TIMEOUT 300 PROCESSORS 2 LABELS "reference;llama")
