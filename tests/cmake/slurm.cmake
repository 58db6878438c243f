# slurm.cmake — jobs/train.sbatch against a real one-machine Slurm
# (tests/slurm/run.sh starts munged, slurmctld and slurmd, submits the jobs
# users would, stops exactly those daemons). Skipped (77) with the reason
# where Slurm cannot run (not root, no packages). Label: slurm. The jobs run
# 21 tasks side by side for about two minutes, but mostly wait (slowed steps,
# time limits, requeues: a quarter of two cores measured), so the test takes
# one processor slot and other tests run beside it (COST: it starts first, so
# its waiting overlaps the most); its checks wait for states, not times
# (label timing: run under load before a change lands).
set(TD_SLURM_RUN ${CMAKE_CURRENT_SOURCE_DIR}/slurm/run.sh)
if(TD_MPI_FLAVOR STREQUAL "openmpi")
  # the Open MPI build: a job through srun --mpi=pmix, and one stopped by
  # scancel --signal=USR1, requeued and resumed (issue 18)
  add_test(NAME slurm_openmpi_job
    COMMAND bash ${TD_SLURM_RUN} $<TARGET_FILE:trident> ${CMAKE_CURRENT_BINARY_DIR}/slurm train4 scancel)
  set_tests_properties(slurm_openmpi_job PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
    PROCESSORS 1 COST 1000 LABELS "slurm;openmpi;e2e" ENVIRONMENT "${TD_GRID_ENV}")
else()
  add_test(NAME slurm_jobs
    COMMAND bash ${TD_SLURM_RUN} $<TARGET_FILE:trident> ${CMAKE_CURRENT_BINARY_DIR}/slurm)
  set_tests_properties(slurm_jobs PROPERTIES TIMEOUT 420 SKIP_RETURN_CODE 77
    PROCESSORS 1 COST 1000 LABELS "slurm;e2e" ENVIRONMENT "${TD_GRID_ENV}")
endif()
