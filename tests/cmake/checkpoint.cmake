# checkpoint.cmake — end-to-end checkpoint tests through the command line
# (tests/e2e/ckpt_*.sh; docs/architecture.md "Checkpoint file (format 1)", invariants
# 2-5, exit codes 2 and 75). Each script prints PASS/FAIL lines and
# "N passed, M failed". They share TD_CKPT_WORK: the corpus and the
# single-rank reference runs are made once there (flock), stamped with the
# binary's checksum. Label: checkpoint (ctest -L checkpoint).
set(TD_CKPT_WORK ${CMAKE_CURRENT_BINARY_DIR}/checkpoint_e2e)
set(TD_CKPT_E2E ${CMAKE_CURRENT_SOURCE_DIR}/e2e)

# td_add_ckpt_test(NAME name SCRIPT file ARGS args... [TIMEOUT s])
function(td_add_ckpt_test)
  cmake_parse_arguments(T "" "NAME;SCRIPT;TIMEOUT" "ARGS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  add_test(NAME ${T_NAME}
    COMMAND bash ${TD_CKPT_E2E}/${T_SCRIPT} $<TARGET_FILE:trident> ${TD_CKPT_WORK} ${T_ARGS})
  set_tests_properties(${T_NAME} PROPERTIES TIMEOUT ${T_TIMEOUT} PROCESSORS 2
    LABELS "e2e;mpi;checkpoint" ENVIRONMENT "${TD_GRID_ENV}")
endfunction()

# 1. exact resumption: 20 steps straight vs stopped after step 10's checkpoint
#    and resumed, bit for bit, on the same grid
td_add_ckpt_test(NAME checkpoint_exact_dp2 SCRIPT ckpt_resume_exact.sh ARGS exact_dp2 2,1,1,0)
td_add_ckpt_test(NAME checkpoint_exact_tp2 SCRIPT ckpt_resume_exact.sh ARGS exact_tp2 1,2,1,0)
td_add_ckpt_test(NAME checkpoint_exact_pp2 SCRIPT ckpt_resume_exact.sh
  ARGS exact_pp2 1,1,2,0,2 --set training.global_batch=16)
td_add_ckpt_test(NAME checkpoint_exact_zero3 SCRIPT ckpt_resume_exact.sh ARGS exact_zero3 2,1,1,3)

# 2. resharding: save at step 10 on one grid, resume on another, compare
#    steps 11..20 and the final parameters with the single-rank run
td_add_ckpt_test(NAME checkpoint_reshard_1_to_222 SCRIPT ckpt_reshard.sh TIMEOUT 600
  ARGS reshard_1_to_222 1,1,1,0 2,2,2,0,2)
td_add_ckpt_test(NAME checkpoint_reshard_222_to_1 SCRIPT ckpt_reshard.sh TIMEOUT 600
  ARGS reshard_222_to_1 2,2,2,1,2 1,1,1,0)
td_add_ckpt_test(NAME checkpoint_reshard_411z3_to_122 SCRIPT ckpt_reshard.sh TIMEOUT 450
  ARGS reshard_411z3_to_122 4,1,1,3 1,2,2,0,2)
td_add_ckpt_test(NAME checkpoint_reshard_212_to_141 SCRIPT ckpt_reshard.sh TIMEOUT 450
  ARGS reshard_212_to_141 2,1,2,2,2 1,4,1,0)
td_add_ckpt_test(NAME checkpoint_reshard_311_to_211 SCRIPT ckpt_reshard.sh
  ARGS --gb 12 reshard_311_to_211 3,1,1,0 2,1,1,0)
td_add_ckpt_test(NAME checkpoint_reshard_stages SCRIPT ckpt_reshard.sh
  ARGS reshard_stages 1,1,2,0,2 1,1,2,0,2
       --src-set parallel.stage_layers=[1,3] --dst-set parallel.stage_layers=[3,1])
#    saved with an empty last stage (head and loss alone), resumed on tp 2
td_add_ckpt_test(NAME checkpoint_reshard_empty_stage SCRIPT ckpt_reshard.sh
  ARGS reshard_empty_stage 1,1,2,1,2 1,2,1,0 --src-set parallel.stage_layers=[4,0])
#    checkpoints do not depend on the pipeline schedule: saved under the
#    interleaved schedule (2 chunks per stage), resumed under 1F1B on the same
#    grid, and under zb-h1 (ZeRO-1) on a single rank
td_add_ckpt_test(NAME checkpoint_reshard_interleaved_to_1f1b SCRIPT ckpt_reshard.sh
  ARGS reshard_interleaved_to_1f1b 1,1,2,0,2 1,1,2,0,2
       --src-set parallel.pp_schedule=interleaved --src-set parallel.virtual_stages=2)
td_add_ckpt_test(NAME checkpoint_reshard_zbh1_to_1 SCRIPT ckpt_reshard.sh
  ARGS reshard_zbh1_to_1 1,1,2,1,2 1,1,1,0 --src-set parallel.pp_schedule=zb-h1)

# 3. a save killed half-way (TD_TEST_CRASH_SAVE) leaves the previous one
td_add_ckpt_test(NAME checkpoint_crash_during_save SCRIPT ckpt_crash.sh ARGS 2,1,1,0)

# 4. SIGUSR1 to mpiexec: exit 75 with a committed checkpoint; the same
#    command resumes bit for bit
td_add_ckpt_test(NAME checkpoint_signal_usr1 SCRIPT ckpt_signal.sh ARGS 2,1,1,0 USR1)
#    and Ctrl-C (SIGINT to mpiexec, which hydra forwards once) does the same,
#    at 1 and 2 ranks
td_add_ckpt_test(NAME checkpoint_signal_int_1 SCRIPT ckpt_signal.sh ARGS 1,1,1,0 INT)
td_add_ckpt_test(NAME checkpoint_signal_int_2 SCRIPT ckpt_signal.sh ARGS 2,1,1,0 INT)
#    and signals inside the saves themselves (a second one during the stop's
#    save): every save commits, exit 75, bitwise resume
td_add_ckpt_test(NAME checkpoint_signal_in_save SCRIPT ckpt_signal_in_save.sh ARGS 2,1,1,0 TERM)
#    and a flood of SIGUSR1 during the steps: the stop signals are taken by
#    trident's own thread, never by a compute thread (a handler frame pushed
#    into oneDNN's JIT kernels corrupted the heap)
td_add_ckpt_test(NAME checkpoint_signal_flood SCRIPT signal_flood.sh TIMEOUT 600)
# asynchronous saves: the same files, exact and resharded resumption from
# them, kill -9 and SIGUSR1 while the background writer is in flight
td_add_ckpt_test(NAME checkpoint_async SCRIPT ckpt_async.sh TIMEOUT 600)
#    and jobs/mpirun.sh (the lab-machine launcher) with RESTART=1: SIGUSR1 to
#    its mpiexec, it relaunches, the run resumes bit for bit
td_add_ckpt_test(NAME checkpoint_mpirun_script SCRIPT mpirun_script.sh)

# 5. damaged checkpoints: exit 2 on every rank, one message naming the file
td_add_ckpt_test(NAME checkpoint_bad_files SCRIPT ckpt_bad.sh)

# 6. h5py / h5ls / h5dump read a tp 2 + ZeRO-3 save, equal to the 1-rank run's
td_add_ckpt_test(NAME checkpoint_h5py SCRIPT ckpt_python.sh ARGS 2,2,1,3)
