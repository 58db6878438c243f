# Watching a run: TensorBoard event files read by an independent decoder
# (Debian's protobuf and crcmod), the loss-curve plot, and generated text
# that a terminal can show (valid UTF-8 whatever the sampled tokens).
add_test(NAME tensorboard
  COMMAND ${TD_PY} ${CMAKE_CURRENT_SOURCE_DIR}/monitoring/tensorboard.py $<TARGET_FILE:trident>
          ${MPIEXEC_EXECUTABLE} ${CMAKE_CURRENT_BINARY_DIR}/tensorboard)
set_tests_properties(tensorboard PROPERTIES TIMEOUT 300 PROCESSORS 2 LABELS "e2e;monitoring"
  ENVIRONMENT "HWLOC_PLUGINS_BLACKLIST=hwloc_pci")
add_test(NAME generate_utf8
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/monitoring/generate_utf8.sh $<TARGET_FILE:trident>
          ${CMAKE_CURRENT_BINARY_DIR}/monitoring bytes)
# generate_utf8*: one short process after another (half a core measured): one slot
set_tests_properties(generate_utf8 PROPERTIES TIMEOUT 300 PROCESSORS 1 LABELS "e2e;monitoring"
  ENVIRONMENT "HWLOC_PLUGINS_BLACKLIST=hwloc_pci")
# GPT-2 tokens: the tokenizer's files from npm, shared with the tokenizer tests
add_test(NAME generate_utf8_gpt2
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/monitoring/generate_utf8.sh $<TARGET_FILE:trident>
          ${CMAKE_CURRENT_BINARY_DIR}/tokenizer gpt2)
set_tests_properties(generate_utf8_gpt2 PROPERTIES TIMEOUT 600 PROCESSORS 1 SKIP_RETURN_CODE 77
  LABELS "e2e;monitoring;tokenizer" RESOURCE_LOCK tokenizer_fetch
  ENVIRONMENT "HWLOC_PLUGINS_BLACKLIST=hwloc_pci")
