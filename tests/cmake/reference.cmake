# Training against the PyTorch oracle (tests/reference/), through the CLI.
add_test(NAME reference_train
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/e2e/reference_train.sh $<TARGET_FILE:trident>
          ${CMAKE_CURRENT_BINARY_DIR}/reference_train)
set_tests_properties(reference_train PROPERTIES TIMEOUT 300 PROCESSORS 2 LABELS "reference")
