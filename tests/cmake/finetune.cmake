# finetune.cmake — fine-tuning data (issue 41): JSON Lines and chat
# conversations, their loss masks and document boundaries, packing with
# data.attend: document.
#   packing_gpt2, packing_llama: tests/e2e/packing.sh — packed chat windows
#     against the float64 oracle computing each document apart (loss,
#     gradients, update, 8-step curve), a masked-out end token changed
#     changes nothing bit for bit, and dp 2 × cp 2 and tp 2 × pp 2 against
#     one rank;
#   bad_records: tests/e2e/bad_records.sh — each kind of malformed line
#     (exit 2, file:line and the field, 1 and 2 ranks), --skip-bad, and the
#     decks data.attend: document cannot serve.
add_test(NAME packing_gpt2 COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e/packing.sh
  $<TARGET_FILE:trident> ${CMAKE_CURRENT_BINARY_DIR}/packing ${PROJECT_SOURCE_DIR}/inputs/tiny.yaml)
add_test(NAME packing_llama COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e/packing.sh
  $<TARGET_FILE:trident> ${CMAKE_CURRENT_BINARY_DIR}/packing ${PROJECT_SOURCE_DIR}/inputs/llama-tiny.yaml)
set_tests_properties(packing_gpt2 packing_llama PROPERTIES TIMEOUT 600 PROCESSORS 2
  LABELS "e2e;mpi;reference;finetune" ENVIRONMENT "${TD_GRID_ENV}")
add_test(NAME bad_records COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e/bad_records.sh
  $<TARGET_FILE:trident> ${CMAKE_CURRENT_BINARY_DIR}/bad_records)
set_tests_properties(bad_records PROPERTIES TIMEOUT 300 PROCESSORS 2
  LABELS "e2e;mpi;bad_input;finetune" ENVIRONMENT "${TD_GRID_ENV}")
# choice_eval: tests/e2e/choice_eval.sh — `trident eval --task choice` on
#   1 rank, dp 2, tp 2 × pp 2 and cp 2 (LLaMA): every ending's mean loss and
#   acc / acc_norm against the float64 oracle (tests/reference/choice_ref.py)
#   from the checkpoint's weights, both families; eval.choice during
#   training; malformed files.
add_test(NAME choice_eval COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e/choice_eval.sh
  $<TARGET_FILE:trident> ${CMAKE_CURRENT_BINARY_DIR}/choice_eval)
set_tests_properties(choice_eval PROPERTIES TIMEOUT 600 PROCESSORS 2
  LABELS "e2e;mpi;reference;finetune" ENVIRONMENT "${TD_GRID_ENV}")
# finetune_workflow: tests/e2e/finetune_workflow.sh — a LLaMA-3-shaped model
#   in Hugging Face files → init_from → fine-tuned on chat data (LLaMA 3's
#   tokenizer and template, loss mask, packed documents) on dp 2 → export →
#   a float64 reader's masked loss = trident eval's (1e-6).
add_test(NAME finetune_workflow COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e/finetune_workflow.sh
  $<TARGET_FILE:trident> ${CMAKE_CURRENT_BINARY_DIR}/finetune)
set_tests_properties(finetune_workflow PROPERTIES TIMEOUT 600 PROCESSORS 2 SKIP_RETURN_CODE 77
  LABELS "e2e;mpi;reference;finetune;llama" ENVIRONMENT "${TD_GRID_ENV}")
