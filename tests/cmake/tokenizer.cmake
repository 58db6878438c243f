# tokenizer.cmake — the GPT-2 and LLaMA 3 tokenizers (io/td_bpe.h, io/bpe.c,
# io/bpe_llama3.c).
#   bpe: the offline checks of test_bpe (small generated vocabularies against
#     a plain BPE, pre-token boundaries, the invalid-UTF-8 rule, malformed
#     encoder.json / vocab.bpe files); needs nothing from the network.
#   tokenizer_gpt2: tests/tokenizer/run.sh — the hard corpus against npm's
#     gpt-3-encoder and OpenAI's encoder.py (npm install into the build tree
#     once; 77 = skipped without npm, node or the registry).
#   tokenizer_llama3: tests/tokenizer/run_llama3.sh — Meta's tokenizer.model
#     and a tokenizer.json written from npm's llama3-tokenizer-js, the hard
#     corpus plus LLaMA 3's cases against the package's ids.
td_add_unit(test_bpe ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_bpe.c)
add_test(NAME bpe COMMAND test_bpe)
set_tests_properties(bpe PROPERTIES TIMEOUT 60 LABELS "unit;tokenizer"
  ENVIRONMENT "TMPDIR=${CMAKE_CURRENT_BINARY_DIR}")
add_test(NAME tokenizer_gpt2 COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tokenizer/run.sh
  $<TARGET_FILE:test_bpe> ${CMAKE_CURRENT_BINARY_DIR}/tokenizer)
set_tests_properties(tokenizer_gpt2 PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77
  LABELS "unit;tokenizer" RESOURCE_LOCK tokenizer_fetch)
add_test(NAME tokenizer_llama3 COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tokenizer/run_llama3.sh
  $<TARGET_FILE:test_bpe> ${CMAKE_CURRENT_BINARY_DIR}/tokenizer)
set_tests_properties(tokenizer_llama3 PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77
  LABELS "unit;tokenizer" RESOURCE_LOCK tokenizer_fetch)
# prepare_gpt2: `trident prepare --tokenizer gpt2` end to end (tests/tokenizer/
#   prepare.sh): streamed pieces = whole files, the dataset's attributes and
#   document markers, one document against gpt-3-encoder, and `train` on it.
add_test(NAME prepare_gpt2 COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tokenizer/prepare.sh
  $<TARGET_FILE:trident> ${CMAKE_CURRENT_BINARY_DIR}/tokenizer)
set_tests_properties(prepare_gpt2 PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77 PROCESSORS 2
  LABELS "e2e;tokenizer" ENVIRONMENT "${TD_GRID_ENV}" RESOURCE_LOCK tokenizer_fetch)
# prepare_llama3: `trident prepare --tokenizer llama3` end to end (tests/
#   tokenizer/prepare_llama3.sh): both file kinds, pieces and 3 ranks give the
#   same uint32 dataset, equal to llama3-tokenizer-js's ids of each document
#   wrapped in <|begin_of_text|> / <|end_of_text|>; train, checkpoint and
#   generate carry tokenizer.model; a wrong-kind file is exit 2.
add_test(NAME prepare_llama3 COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tokenizer/prepare_llama3.sh
  $<TARGET_FILE:trident> ${CMAKE_CURRENT_BINARY_DIR}/tokenizer)
set_tests_properties(prepare_llama3 PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77 PROCESSORS 2
  LABELS "e2e;tokenizer" ENVIRONMENT "${TD_GRID_ENV}" RESOURCE_LOCK tokenizer_fetch)
