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
# empty end chunks (Llama 3's layout): the first model chunk holds the
# embedding alone, the last the final norm, head and loss alone — under the
# interleaved schedule (4 chunks of 0, 2, 2, 0 layers, ZeRO-1), and with
# 1F1B the first stage alone at (tp 2, pp 2) ZeRO-2 (the tied embedding's
# sum over the first and last stage every micro-batch)
td_add_grid_test(NAME pp_empty_ends_interleaved LABELS pipeline
  ARGS --run-set parallel.pp_schedule=interleaved --run-set parallel.virtual_stages=2
       --run-set parallel.stage_layers=[0,2,2,0] ${TD_GRID_BIN} ${TD_GRID_WORK}
       pp_empty_ends_interleaved ${TD_GRID_REF} 1,1,2,1,2 ${G16})
td_add_grid_test(NAME pp_empty_first_stage_tp2 LABELS pipeline tensor_parallel
  ARGS --run-set parallel.stage_layers=[0,4] ${TD_GRID_BIN} ${TD_GRID_WORK}
       pp_empty_first_stage_tp2 ${TD_GRID_REF} 1,2,2,2,2 ${G16})
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

# The schedule builders and simulator: each schedule's bubble exactly
# (p−1)/m, (p−1)/(v·m), (p−1)/(3m) for p ∈ {2, 4, 8}, m ∈ {p, 2p, 4p}.
td_add_unit(test_schedule ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_schedule.c)
add_test(NAME pp_schedule_bubbles COMMAND test_schedule)
set_tests_properties(pp_schedule_bubbles PROPERTIES TIMEOUT 60 LABELS "unit;pipeline")

# zb-h1 (backward split into B and W) is bit-identical to 1F1B on the same
# grid: losses, grad_norm and final parameters (--bitwise), both families,
# pp 2 (dp 2) and pp 4, ZeRO-1 and ZeRO-3, fp32 and bf16, with tensor
# parallelism, recomputation and the host-staged messages of the GPU path —
# with the materialised head: the fused head's weight gradient is summed in
# another order under the split backward (docs/parallelism.md), which oneDNN's
# AVX2 products round differently even for one chunk; pp_zbh1_fused_head
# checks that path at the fp32 bounds, with several chunks.
set(TD_ZB --bitwise --steps 4 --run-set parallel.pp_schedule=zb-h1)
set(TD_ZB_SET --set training.global_batch=16 --set schedule.warmup=2 --set model.head=materialized)
td_add_grid_test(NAME pp_zbh1_gpt2_pp2_zero1_fp32 LABELS pipeline
  ARGS ${TD_ZB} ${TD_GRID_BIN} ${TD_GRID_WORK} pp_zbh1_gpt2_pp2_zero1_fp32 2,1,2,1,2 2,1,2,1,2
       ${TD_ZB_SET})
td_add_grid_test(NAME pp_zbh1_llama_pp2_zero3_bf16 LABELS pipeline llama
  ARGS ${TD_ZB} --deck ${PROJECT_SOURCE_DIR}/inputs/llama-tiny.yaml ${TD_GRID_BIN} ${TD_GRID_WORK}
       pp_zbh1_llama_pp2_zero3_bf16 2,1,2,3,2 2,1,2,3,2 ${TD_ZB_SET} --set training.precision=bf16)
td_add_grid_test(NAME pp_zbh1_gpt2_pp4_zero3_bf16 LABELS pipeline
  ARGS ${TD_ZB} ${TD_GRID_BIN} ${TD_GRID_WORK} pp_zbh1_gpt2_pp4_zero3_bf16 1,1,4,3,2 1,1,4,3,2
       ${TD_ZB_SET} --set training.precision=bf16)
td_add_grid_test(NAME pp_zbh1_llama_pp4_zero1_fp32 LABELS pipeline llama
  ARGS ${TD_ZB} --deck ${PROJECT_SOURCE_DIR}/inputs/llama-tiny.yaml ${TD_GRID_BIN} ${TD_GRID_WORK}
       pp_zbh1_llama_pp4_zero1_fp32 1,1,4,1,2 1,1,4,1,2 ${TD_ZB_SET})
td_add_grid_test(NAME pp_zbh1_fused_head LABELS pipeline
  ARGS --steps 4 --run-set parallel.pp_schedule=zb-h1 ${TD_GRID_BIN} ${TD_GRID_WORK}
       pp_zbh1_fused_head 2,1,2,1,2 2,1,2,1,2 --set training.global_batch=16
       --set schedule.warmup=2 --set model.head_chunk=48)
td_add_grid_test(NAME pp_zbh1_tp2_recompute_staged LABELS pipeline llama
  ARGS ${TD_ZB} --run-env TD_TEST_STAGED=1 --deck ${PROJECT_SOURCE_DIR}/inputs/llama-tiny.yaml
       ${TD_GRID_BIN} ${TD_GRID_WORK} pp_zbh1_tp2_recompute_staged 1,2,2,3,2 1,2,2,3,2 ${TD_ZB_SET}
       --set training.precision=bf16 --set training.recompute=blocks)

# interleaved (parallel.virtual_stages 2) against 1F1B on the same grid:
# bit-identical wherever the same sums run in the same order (the gradient
# norm is summed per tensor in registry order); with a tied head at ZeRO-2/3
# the embedding's gradient is summed once a step instead of per micro-batch,
# so there losses and grad_norm agree within 1e-8 relative (fp32) or the
# mixed-precision bounds of precision.cmake (bf16, tp). pp 4 runs 8 layers (one per chunk).
set(TD_IL --steps 4 --run-set parallel.pp_schedule=interleaved --run-set parallel.virtual_stages=2)
td_add_grid_test(NAME pp_interleaved_gpt2_pp2_zero1_fp32 LABELS pipeline
  ARGS ${TD_IL} --bitwise ${TD_GRID_BIN} ${TD_GRID_WORK} pp_interleaved_gpt2_pp2_zero1_fp32
       2,1,2,1,2 2,1,2,1,2 ${TD_ZB_SET})
td_add_grid_test(NAME pp_interleaved_llama_pp2_zero3_bf16 LABELS pipeline llama
  ARGS ${TD_IL} --bitwise --deck ${PROJECT_SOURCE_DIR}/inputs/llama-tiny.yaml ${TD_GRID_BIN}
       ${TD_GRID_WORK} pp_interleaved_llama_pp2_zero3_bf16 2,1,2,3,2 2,1,2,3,2 ${TD_ZB_SET}
       --set training.precision=bf16)
td_add_grid_test(NAME pp_interleaved_llama_pp4_zero1_fp32 LABELS pipeline llama
  ARGS ${TD_IL} --bitwise --deck ${PROJECT_SOURCE_DIR}/inputs/llama-tiny.yaml ${TD_GRID_BIN}
       ${TD_GRID_WORK} pp_interleaved_llama_pp4_zero1_fp32 1,1,4,1,2 1,1,4,1,2 ${TD_ZB_SET}
       --set model.layers=8)
td_add_grid_test(NAME pp_interleaved_gpt2_pp4_zero3_fp32 LABELS pipeline
  ARGS ${TD_IL} --loss-rtol 1e-8 --norm-rtol 1e-8 ${TD_GRID_BIN} ${TD_GRID_WORK}
       pp_interleaved_gpt2_pp4_zero3_fp32 1,1,4,3,2 1,1,4,3,2 ${TD_ZB_SET} --set model.layers=8)
td_add_grid_test(NAME pp_interleaved_gpt2_tp2_zero3_bf16_recompute_staged LABELS pipeline
  ARGS ${TD_IL} --loss-rtol 1e-3 --norm-rtol 1e-2 --param-rtol 5e-2 --run-env TD_TEST_STAGED=1
       ${TD_GRID_BIN} ${TD_GRID_WORK}
       pp_interleaved_gpt2_tp2_zero3_bf16_recompute_staged 1,2,2,3,2 1,2,2,3,2 ${TD_ZB_SET}
       --set training.precision=bf16 --set training.recompute=blocks)
