# interop.cmake — Hugging Face files (issue 16).
#   safetensors: the writer against Python's json + numpy, names that need
#     escaping included (test_safetensors + tests/reference/check_safetensors.py).
#   export: `trident export` of a 2-rank checkpoint in fp32 and bf16: every
#     tensor read back, config.json, the PyTorch reference's loss on the
#     export = trident eval (1e-5), bad use exit 2 (tests/e2e/export.sh).
td_add_unit(test_safetensors ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_safetensors.c)
add_test(NAME safetensors COMMAND bash -c "set -e; \
'$<TARGET_FILE:test_safetensors>' '${CMAKE_CURRENT_BINARY_DIR}/test.safetensors'; \
/usr/bin/python3 '${CMAKE_CURRENT_SOURCE_DIR}/reference/check_safetensors.py' \
'${CMAKE_CURRENT_BINARY_DIR}/test.safetensors'")
set_tests_properties(safetensors PROPERTIES TIMEOUT 60 LABELS "unit;interop")
add_test(NAME export COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/e2e/export.sh $<TARGET_FILE:trident>
  ${CMAKE_CURRENT_BINARY_DIR}/export)
set_tests_properties(export PROPERTIES TIMEOUT 300 PROCESSORS 2 LABELS "e2e;mpi;interop"
  ENVIRONMENT "${TD_GRID_ENV}")
#   export_llama: the LLaMA family: LlamaForCausalLM names (no prefix, lm_head
#     kept), config.json, the float64 PyTorch LLaMA's loss on the export =
#     trident eval (1e-5), and model.init_from the export on pp 2 bit for bit
#     (tests/e2e/export_llama.sh).
add_test(NAME export_llama COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/e2e/export_llama.sh
  $<TARGET_FILE:trident> ${CMAKE_CURRENT_BINARY_DIR}/export_llama)
set_tests_properties(export_llama PROPERTIES TIMEOUT 300 PROCESSORS 2 LABELS "e2e;mpi;interop;llama"
  ENVIRONMENT "${TD_GRID_ENV}")
