# robustness.cmake — issue 12: the promise "never hangs, never loses a
# committed checkpoint, a clear message for bad input" under faults, through
# the command line (tests/e2e/fault_*.sh, memory_model.sh, mpmd_env.sh), and
# the build's fallback for an unsupported oneDNN.
set(TD_ROBUST_ENV "OMP_NUM_THREADS=1;HWLOC_PLUGINS_BLACKLIST=hwloc_pci;MPIEXEC=${MPIEXEC_EXECUTABLE}")
set(TD_ROBUST_WORK ${CMAKE_CURRENT_BINARY_DIR}/robustness)

# test-only LD_PRELOAD library: a full disk for one file (fault_enospc.sh
# uses it where it cannot mount a small file system)
add_library(td_enospc MODULE ${CMAKE_CURRENT_SOURCE_DIR}/fault/enospc_preload.c)
target_link_libraries(td_enospc PRIVATE ${CMAKE_DL_LIBS})

# td_add_robust_test(NAME script [extra args...]) — run from the source root
function(td_add_robust_test name script timeout)
  add_test(NAME ${name}
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e/${script} $<TARGET_FILE:trident>
            ${TD_ROBUST_WORK}/${name} ${ARGN}
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(${name} PROPERTIES TIMEOUT ${timeout} PROCESSORS 2
    LABELS "robustness;e2e;mpi" ENVIRONMENT "${TD_ROBUST_ENV}" SKIP_RETURN_CODE 77)
endfunction()

td_add_robust_test(memory_model memory_model.sh 300)
# straggler detection: a rank slowed in compute or data loading is named; an
# unloaded run reports none (alone: other tests' load would make stragglers)
td_add_robust_test(stragglers stragglers.sh 300)
set_tests_properties(stragglers PROPERTIES RUN_SERIAL TRUE)
# jobs/scaling.sh: 1 and 2 ranks, strong and weak, the table's arithmetic
td_add_robust_test(scaling scaling.sh 300)
td_add_robust_test(fault_alone fault_alone.sh 240)
td_add_robust_test(fault_kill fault_kill.sh 240)
td_add_robust_test(fault_stop fault_stop.sh 300)
td_add_robust_test(fault_enospc fault_enospc.sh 240 $<TARGET_FILE:td_enospc>)
td_add_robust_test(fault_enospc_preload fault_enospc.sh 240 $<TARGET_FILE:td_enospc> --preload)
# the same with checkpoint.async: the failure comes from the background writer
td_add_robust_test(fault_enospc_async fault_enospc.sh 240 $<TARGET_FILE:td_enospc> --preload --async)
td_add_robust_test(mpmd_env mpmd_env.sh 240)

add_test(NAME build_onednn3_fallback
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/configure/onednn3_fallback.sh ${PROJECT_SOURCE_DIR}
          ${TD_ROBUST_WORK}/onednn3)
set_tests_properties(build_onednn3_fallback PROPERTIES TIMEOUT 120 LABELS "robustness;build")
