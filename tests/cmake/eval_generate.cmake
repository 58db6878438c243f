# Evaluation against the PyTorch reference and deterministic generation,
# through the command line, on 1 rank and on tensor/pipeline-parallel grids.
add_test(NAME eval_generate
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e/eval_generate.sh $<TARGET_FILE:trident>
          ${MPIEXEC_EXECUTABLE} ${CMAKE_CURRENT_BINARY_DIR}/eval_generate)
set_tests_properties(eval_generate PROPERTIES TIMEOUT 300 PROCESSORS 2 LABELS "e2e;data"
  ENVIRONMENT "HWLOC_PLUGINS_BLACKLIST=hwloc_pci")

# Runtime and input errors of `trident train`: exit codes and one message.
add_test(NAME train_errors
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e/train_errors.sh $<TARGET_FILE:trident>
          ${MPIEXEC_EXECUTABLE} ${CMAKE_CURRENT_BINARY_DIR}/train_errors)
set_tests_properties(train_errors PROPERTIES TIMEOUT 300 PROCESSORS 2 LABELS "e2e"
  ENVIRONMENT "HWLOC_PLUGINS_BLACKLIST=hwloc_pci")

# One run per checkpoint folder: a rerun with resume: never refused (or
# overwritten on request), a second live run refused at start, stale locks.
add_test(NAME run_folder
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e/run_folder.sh $<TARGET_FILE:trident>
          ${MPIEXEC_EXECUTABLE} ${CMAKE_CURRENT_BINARY_DIR}/run_folder)
set_tests_properties(run_folder PROPERTIES TIMEOUT 300 PROCESSORS 2 LABELS "e2e"
  ENVIRONMENT "HWLOC_PLUGINS_BLACKLIST=hwloc_pci")

# The paths users give: bad ones exit 2 in one line; run and ckpt folders
# mean their latest; ckpt info short and full; help and warnings.
add_test(NAME cli_paths
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e/cli_paths.sh $<TARGET_FILE:trident>
          ${MPIEXEC_EXECUTABLE} ${CMAKE_CURRENT_BINARY_DIR}/cli_paths)
set_tests_properties(cli_paths PROPERTIES TIMEOUT 300 PROCESSORS 2 LABELS "e2e"
  ENVIRONMENT "HWLOC_PLUGINS_BLACKLIST=hwloc_pci")
