# robustness_malformed.cmake — bad files and files that change under a run,
# through the command line (issue 12, "Injected faults"; docs/architecture.md
# invariants 3 and 5):
#   malformed_h5    damaged copies of a real checkpoint and a real dataset
#                   (tests/e2e/malformed_h5.py makes them) given to train,
#                   eval and ckpt info at 1 and 2 ranks: exit 2 naming the
#                   file and the object, no hang, no crash;
#   dataset_change  the dataset truncated, overwritten in place or replaced
#                   by rename while a 2-rank training reads it.
set(TD_MALFORMED_WORK ${CMAKE_CURRENT_BINARY_DIR}/robustness_malformed)
foreach(t malformed_h5 dataset_change)
  if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/e2e/${t}.sh)
    add_test(NAME ${t}
      COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e/${t}.sh $<TARGET_FILE:trident>
              ${TD_MALFORMED_WORK}/${t})
    set_tests_properties(${t} PROPERTIES TIMEOUT 300 PROCESSORS 2
      LABELS "robustness;e2e;mpi"
      ENVIRONMENT "OMP_NUM_THREADS=1;HWLOC_PLUGINS_BLACKLIST=hwloc_pci;MPIEXEC=${MPIEXEC_EXECUTABLE}")
  endif()
endforeach()
