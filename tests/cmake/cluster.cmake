# cluster.cmake — trident on a Slurm cluster of two hosts on one machine
# (tests/cluster/run.sh: network, UTS, IPC and mount namespaces per host,
# veths to a private bridge, a slurmd per host). Skipped (77) with the
# reason where the namespaces cannot be made (not root) or Slurm cannot run.
# Label: cluster. Its jobs run for about three minutes, much of it waiting
# (a rate-limited link, requeues, the watchdog), so the test takes one
# processor slot and other tests run beside it (COST: it starts first, so its
# waiting overlaps the most); its checks wait for states and
# compare runs with each other, not with clocks (label timing). MPICH builds
# only: the Open MPI build launches through PMIx (tests/cmake/slurm.cmake).
if(NOT TD_MPI_FLAVOR STREQUAL "openmpi")
  add_test(NAME cluster_nodes
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cluster/run.sh $<TARGET_FILE:trident>
            ${CMAKE_CURRENT_BINARY_DIR}/cluster)
  set_tests_properties(cluster_nodes PROPERTIES TIMEOUT 420 SKIP_RETURN_CODE 77
    PROCESSORS 1 COST 1000 LABELS "cluster;e2e" ENVIRONMENT "${TD_GRID_ENV}")
endif()
