# pipeline.cmake — pipeline parallelism (GPipe, 1F1B) and the full 3-D grid
# against grid invariance, through the command line (see data_parallel.cmake).
# Global batch 16 with micro-batch 2: 8 micro-batches per pipeline.
set(G16 --set training.global_batch=16)
foreach(sched gpipe 1f1b)
  foreach(pp 2 4)
    td_add_grid_test(NAME pp_grid_pp${pp}_${sched} LABELS pipeline
      ARGS ${TD_GRID_BIN} ${TD_GRID_WORK} pp_grid_pp${pp}_${sched} ${TD_GRID_REF} 1,1,${pp},0,2
           ${G16} --set parallel.pp_schedule=${sched})
  endforeach()
endforeach()
# uneven stages: 1 layer on stage 0, 3 on stage 1
td_add_grid_test(NAME pp_grid_uneven LABELS pipeline
  ARGS --run-set parallel.stage_layers=[1,3] ${TD_GRID_BIN} ${TD_GRID_WORK} pp_grid_uneven
       ${TD_GRID_REF} 1,1,2,0,2 ${G16})
# the full 3-D grid on 8 ranks with ZeRO-1, and (dp 1, tp 2, pp 2) with ZeRO-3
td_add_grid_test(NAME pp_grid_3d_zero1 LABELS pipeline TIMEOUT 600
  ARGS ${TD_GRID_BIN} ${TD_GRID_WORK} pp_grid_3d_zero1 ${TD_GRID_REF} 2,2,2,1,2 ${G16})
td_add_grid_test(NAME pp_grid_tp2_pp2_zero3 LABELS pipeline
  ARGS ${TD_GRID_BIN} ${TD_GRID_WORK} pp_grid_tp2_pp2_zero3 ${TD_GRID_REF} 1,2,2,3,2 ${G16})
td_add_grid_test(NAME pp_twice_pp2_1f1b LABELS pipeline
  ARGS --twice ${TD_GRID_BIN} ${TD_GRID_WORK} pp_twice_pp2_1f1b 1,1,2,0,2 ${G16})
# fewer micro-batches (2) than stages (4): accepted with a warning, still exact
td_add_grid_test(NAME pp_grid_few_micro LABELS pipeline
  ARGS ${TD_GRID_BIN} ${TD_GRID_WORK} pp_grid_few_micro ${TD_GRID_REF} 1,1,4,0,4 --set training.global_batch=8)

# 1F1B keeps at most pp − stage micro-batches of activations alive: asserted
# from trident's own accounting (metrics pp_live_peak), with the bubble.
add_test(NAME pp_live_activations
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e/pp_live.sh $<TARGET_FILE:trident> ${MPIEXEC_EXECUTABLE}
          ${CMAKE_CURRENT_BINARY_DIR}/pp_live)
set_tests_properties(pp_live_activations PROPERTIES TIMEOUT 300 PROCESSORS 2 LABELS "e2e;mpi;pipeline"
  ENVIRONMENT "OMP_NUM_THREADS=1;HWLOC_PLUGINS_BLACKLIST=hwloc_pci")
