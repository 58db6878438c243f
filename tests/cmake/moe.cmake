# moe.cmake — mixture of experts (model.moe; docs/architecture.md, "Mixture
# of experts"): inputs/moe-tiny.yaml (llama-tiny with sparse blocks 1 and 3:
# 4 SwiGLU experts of width 96, top 2, load-balancing loss 0.01, z-loss
# 0.001), and GPT-2's experts on inputs/tiny.yaml with the same model.moe
# (TD_MOE_GPT2: GELU experts with biases). The kernels' own tests
# (moe_kernels, moe_kernels_cuda) are in kernels.cmake.
set(TD_MOE_DECK ${PROJECT_SOURCE_DIR}/inputs/moe-tiny.yaml)
set(TD_MOE_WORK ${CMAKE_CURRENT_BINARY_DIR}/moe_grid)

# reference_moe: against llama_ref.py's Mixtral block in float64
# (check_train.py: step-0 loss and every gradient, the update, the replayed
# curve, and (f) the auxiliary terms of every step). The replay stops at step
# 8 (TD_REPLAY_STEPS): a token whose two best logits are within float32's
# rounding routes differently in the float64 oracle, and from there the
# curves part (measured on GPT-2's experts: loss 1.2e-4, grad_norm 6e-2 by
# step 15; the first at step 10) — a discrete choice, not an error.
add_test(NAME reference_moe
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/e2e/reference_train.sh $<TARGET_FILE:trident>
          ${CMAKE_CURRENT_BINARY_DIR}/reference_moe ${TD_MOE_DECK})
set_tests_properties(reference_moe PROPERTIES TIMEOUT 300 PROCESSORS 2
  LABELS "reference;llama;moe" ENVIRONMENT TD_REPLAY_STEPS=8)

# reference_moe_capacity: the same with model.moe.capacity_factor 1.0 (per
# sequence an expert keeps its first ⌈T·k/E⌉ = 32 slots; 19% dropped).
add_test(NAME reference_moe_capacity
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/e2e/reference_train.sh $<TARGET_FILE:trident>
          ${CMAKE_CURRENT_BINARY_DIR}/reference_moe_capacity ${TD_MOE_DECK}
          --set model.moe.capacity_factor=1.0)
set_tests_properties(reference_moe_capacity PROPERTIES TIMEOUT 300 PROCESSORS 2
  LABELS "reference;llama;moe" ENVIRONMENT TD_REPLAY_STEPS=8)

# Grid invariance at the fp32 bounds (loss, grad_norm and the auxiliary terms
# 1e-4 a step, the least and most loaded expert's slots equal — the same
# routing — and the final parameters of every expert): tensor parallel with sequence
# parallelism (experts split like the MLP, the router replicated), data
# parallel at ZeRO-1 and ZeRO-3 with accumulation, 1F1B, interleaved and
# zb-h1 pipelines, context parallel, and block recomputation bit for bit.
td_add_grid_test(NAME moe_grid_tp2_sp LABELS moe
  ARGS --deck ${TD_MOE_DECK} --run-set parallel.sequence_parallel=true ${TD_GRID_BIN}
       ${TD_MOE_WORK} moe_grid_tp2_sp ${TD_GRID_REF} 1,2,1,0)
td_add_grid_test(NAME moe_grid_dp2_zero1 LABELS moe
  ARGS --deck ${TD_MOE_DECK} ${TD_GRID_BIN} ${TD_MOE_WORK} moe_grid_dp2_zero1 ${TD_GRID_REF}
       2,1,1,1,2)
td_add_grid_test(NAME moe_grid_dp2_zero3 LABELS moe
  ARGS --deck ${TD_MOE_DECK} ${TD_GRID_BIN} ${TD_MOE_WORK} moe_grid_dp2_zero3 ${TD_GRID_REF}
       2,1,1,3)
td_add_grid_test(NAME moe_grid_pp2_1f1b LABELS moe
  ARGS --deck ${TD_MOE_DECK} ${TD_GRID_BIN} ${TD_MOE_WORK} moe_grid_pp2_1f1b ${TD_GRID_REF}
       1,1,2,0,2)
td_add_grid_test(NAME moe_grid_pp2_interleaved LABELS moe
  ARGS --deck ${TD_MOE_DECK} --run-set parallel.pp_schedule=interleaved
       --run-set parallel.virtual_stages=2 ${TD_GRID_BIN} ${TD_MOE_WORK} moe_grid_pp2_interleaved
       ${TD_GRID_REF} 1,1,2,0,2)
# the split backward (zb-h1: the experts' weight gradients recorded piece by
# piece for W) at ZeRO-3 with block recomputation
td_add_grid_test(NAME moe_grid_pp2_zbh1 LABELS moe
  ARGS --deck ${TD_MOE_DECK} --run-set parallel.pp_schedule=zb-h1
       --run-set training.recompute=blocks ${TD_GRID_BIN} ${TD_MOE_WORK} moe_grid_pp2_zbh1
       ${TD_GRID_REF} 1,1,2,3,2)
# with a capacity (1.0: 19% of the slots dropped, per sequence): tp 2 with
# sequence parallelism, dp 2 with accumulation at ZeRO-1, pp 2
set(_cap --set model.moe.capacity_factor=1.0)
td_add_grid_test(NAME moe_capacity_grid_tp2_sp LABELS moe
  ARGS --deck ${TD_MOE_DECK} --run-set parallel.sequence_parallel=true ${TD_GRID_BIN}
       ${TD_MOE_WORK} moe_capacity_grid_tp2_sp ${TD_GRID_REF} 1,2,1,0 ${_cap})
td_add_grid_test(NAME moe_capacity_grid_dp2_zero1 LABELS moe
  ARGS --deck ${TD_MOE_DECK} ${TD_GRID_BIN} ${TD_MOE_WORK} moe_capacity_grid_dp2_zero1
       ${TD_GRID_REF} 2,1,1,1,2 ${_cap})
td_add_grid_test(NAME moe_capacity_grid_pp2 LABELS moe
  ARGS --deck ${TD_MOE_DECK} ${TD_GRID_BIN} ${TD_MOE_WORK} moe_capacity_grid_pp2 ${TD_GRID_REF}
       1,1,2,0,2 ${_cap})
# context parallel: each sequence's expert counts and probability sums added
# over the cp ranks for its load-balancing term
td_add_grid_test(NAME moe_grid_cp2 LABELS moe
  ARGS --deck ${TD_MOE_DECK} ${TD_GRID_BIN} ${TD_MOE_WORK} moe_grid_cp2 ${TD_GRID_REF}
       1,1,1,0,0,2)
td_add_grid_test(NAME moe_recompute_blocks LABELS moe
  ARGS --bitwise --deck ${TD_MOE_DECK} --run-set training.recompute=blocks ${TD_GRID_BIN}
       ${TD_MOE_WORK} moe_recompute_blocks ${TD_GRID_REF} ${TD_GRID_REF})
# bf16 at llama_bf16_grid_tp2's bounds (llama.cmake says why): measured, every
# step's grad_norm within 1e-4 but step 13's, 1.03e-2 (2.3074 vs 2.3314), the
# step whose gradient is sensitive to bf16 rounding in the dense model too;
# loss within 3.8e-5. In bf16 the grids' roundings move router logits enough
# to route a few tokens of a near-tie differently (measured: the least
# loaded expert's slots off by up to 4 of ~100, 3.9e-2; the balance term
# 1.7e-4, the z term 1.1e-3): --moe-rtol 5e-2.
td_add_grid_test(NAME moe_bf16_grid_dp2_zero3 LABELS moe precision
  ARGS --moe-rtol 5e-2 --norm-rtol 2e-2 --param-rtol 5e-2 --deck ${TD_MOE_DECK} ${TD_GRID_BIN} ${TD_MOE_WORK}
       moe_bf16_grid_dp2_zero3 ${TD_GRID_REF} 2,1,1,3 --set training.precision=bf16)

# moe_ckpt_reshard_tp2_to_1: saved at step 10 on (dp 2, tp 2), resumed on one
# rank: steps 11-20 and every expert's final parameters as the one-rank
# run's (experts are stored with their global shapes).
add_test(NAME moe_ckpt_reshard_tp2_to_1
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/e2e/ckpt_reshard.sh $<TARGET_FILE:trident>
          ${CMAKE_CURRENT_BINARY_DIR}/moe_ckpt reshard_221_to_1 2,2,1,0 1,1,1,0)
set_tests_properties(moe_ckpt_reshard_tp2_to_1 PROPERTIES TIMEOUT 450 PROCESSORS 2
  LABELS "e2e;mpi;checkpoint;moe"
  ENVIRONMENT "${TD_GRID_ENV};TD_DECK=${TD_MOE_DECK};TD_CKPT_LR=3.0e-4")

# export_moe: Hugging Face Mixtral interop (tests/e2e/export_moe.sh): the
# export's names, values and config.json, the float64 Mixtral on the export
# and on the checkpoint against `trident eval` within 1e-6, model.init_from
# of the export bit for bit at pp 2, and the refusals of a model with dense
# blocks between the sparse ones.
add_test(NAME export_moe
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/e2e/export_moe.sh $<TARGET_FILE:trident>
          ${CMAKE_CURRENT_BINARY_DIR}/export_moe)
set_tests_properties(export_moe PROPERTIES TIMEOUT 300 PROCESSORS 2
  LABELS "e2e;mpi;interop;moe;reference" ENVIRONMENT "${TD_GRID_ENV}")

# GPT-2's experts (its MLP with biases, under h.N.mlp.experts.E.): the
# float64 oracle (gpt2_ref.py's sparse block), with and without a capacity,
# and the grids where the experts' biases matter — tp 2 + sp (c_proj's bias
# added on tp rank 0 only), zb-h1 with recomputation (their gradients
# stashed per expert for W) — and bf16 at dp 2 ZeRO-3.
set(TD_MOE_GPT2 --set model.moe.experts=4 --set model.moe.every=2 --set model.moe.ffn_dim=96
    --set model.moe.z_loss=0.001)
add_test(NAME reference_moe_gpt2
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/e2e/reference_train.sh $<TARGET_FILE:trident>
          ${CMAKE_CURRENT_BINARY_DIR}/reference_moe_gpt2 ${PROJECT_SOURCE_DIR}/inputs/tiny.yaml
          ${TD_MOE_GPT2})
add_test(NAME reference_moe_gpt2_capacity
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/e2e/reference_train.sh $<TARGET_FILE:trident>
          ${CMAKE_CURRENT_BINARY_DIR}/reference_moe_gpt2_capacity
          ${PROJECT_SOURCE_DIR}/inputs/tiny.yaml ${TD_MOE_GPT2} --set model.moe.capacity_factor=1.0)
set_tests_properties(reference_moe_gpt2 reference_moe_gpt2_capacity PROPERTIES TIMEOUT 300
  PROCESSORS 2 LABELS "reference;moe" ENVIRONMENT TD_REPLAY_STEPS=8)
td_add_grid_test(NAME moe_gpt2_grid_tp2_sp LABELS moe
  ARGS --run-set parallel.sequence_parallel=true ${TD_GRID_BIN} ${TD_MOE_WORK}
       moe_gpt2_grid_tp2_sp ${TD_GRID_REF} 1,2,1,0 ${TD_MOE_GPT2})
td_add_grid_test(NAME moe_gpt2_grid_pp2_zbh1 LABELS moe
  ARGS --run-set parallel.pp_schedule=zb-h1 --run-set training.recompute=blocks ${TD_GRID_BIN}
       ${TD_MOE_WORK} moe_gpt2_grid_pp2_zbh1 ${TD_GRID_REF} 1,1,2,1,2 ${TD_MOE_GPT2})
# bf16 GPT-2 experts route a near-tie differently more often (lr 1e-3): over
# 10 steps, measured, loss 6.7e-5, grad_norm 5.3e-4, the balance term 9.2e-4,
# the least loaded expert's slots 5.2e-2, the experts' c_proj biases (10
# updates from 0) 5.1e-2 of their max; past step 12 the routes part enough
# for grad_norm to move 0.11. Which tokens flip depends on the machine's
# instruction set: on an AVX2-only machine (AMD EPYC, 2026-12-07; the same
# numbers before and after the experts' own ZeRO engine) an expert's c_fc
# bias ends 1.34e-1 of its max away (an expert with few tokens, where
# AdamW's step follows the sign of a tiny gradient), its c_proj weight
# 1.05e-1, while loss (1.8e-5) and grad_norm (9.8e-5) stay close: the
# parameters at 2e-1
td_add_grid_test(NAME moe_gpt2_bf16_grid_dp2_zero3 LABELS moe precision
  ARGS --steps 10 --moe-rtol 1e-1 --norm-rtol 2e-2 --param-rtol 2e-1 ${TD_GRID_BIN} ${TD_MOE_WORK}
       moe_gpt2_bf16_grid_dp2_zero3 ${TD_GRID_REF} 2,1,1,3 ${TD_MOE_GPT2}
       --set training.precision=bf16)

# Expert parallelism (parallel.ep; docs/architecture.md, "Expert
# parallelism"): the experts split over ep ranks carved out of dp × cp,
# tokens sent to their experts and back all-to-all, the experts' own ZeRO
# engine over the ranks holding the same experts — at the fp32 bounds of the
# grids above against the one-rank run (ep 1), routing identical (the least
# and most loaded expert's slots equal): ep 2 and ep 4 (every rank its own
# experts), dp 4 × ep 2 at ZeRO-1 with accumulation and at ZeRO-3, ep 2 × tp 2
# with sequence parallelism, ep 2 × pp 2 (1F1B; zb-h1 with recomputation: the
# experts' weight gradients recorded for W on the rows other ranks sent),
# ep 2 × cp 2, with a capacity (dropping on), GPT-2's experts (biases), and
# bf16 at the bounds of moe_bf16_grid_dp2_zero3. Measured (2026-12-07, by
# hand, fp32): every loss within 5e-9, grad_norm within 3e-7.
set(_ep2 --run-set parallel.ep=2)
td_add_grid_test(NAME moe_ep2 LABELS moe
  ARGS --deck ${TD_MOE_DECK} ${_ep2} ${TD_GRID_BIN} ${TD_MOE_WORK} moe_ep2 ${TD_GRID_REF} 2,1,1,0)
td_add_grid_test(NAME moe_ep4 LABELS moe
  ARGS --deck ${TD_MOE_DECK} --run-set parallel.ep=4 ${TD_GRID_BIN} ${TD_MOE_WORK} moe_ep4
       ${TD_GRID_REF} 4,1,1,0)
td_add_grid_test(NAME moe_dp4_ep2_zero1 LABELS moe
  ARGS --deck ${TD_MOE_DECK} ${_ep2} ${TD_GRID_BIN} ${TD_MOE_WORK} moe_dp4_ep2_zero1
       ${TD_GRID_REF} 4,1,1,1,1)
td_add_grid_test(NAME moe_dp4_ep2_zero3 LABELS moe
  ARGS --deck ${TD_MOE_DECK} ${_ep2} ${TD_GRID_BIN} ${TD_MOE_WORK} moe_dp4_ep2_zero3
       ${TD_GRID_REF} 4,1,1,3)
td_add_grid_test(NAME moe_ep2_tp2_sp LABELS moe
  ARGS --deck ${TD_MOE_DECK} ${_ep2} --run-set parallel.sequence_parallel=true ${TD_GRID_BIN}
       ${TD_MOE_WORK} moe_ep2_tp2_sp ${TD_GRID_REF} 2,2,1,0)
td_add_grid_test(NAME moe_ep2_pp2_1f1b LABELS moe
  ARGS --deck ${TD_MOE_DECK} ${_ep2} ${TD_GRID_BIN} ${TD_MOE_WORK} moe_ep2_pp2_1f1b
       ${TD_GRID_REF} 2,1,2,0,2)
td_add_grid_test(NAME moe_ep2_pp2_zbh1 LABELS moe
  ARGS --deck ${TD_MOE_DECK} ${_ep2} --run-set parallel.pp_schedule=zb-h1
       --run-set training.recompute=blocks ${TD_GRID_BIN} ${TD_MOE_WORK} moe_ep2_pp2_zbh1
       ${TD_GRID_REF} 2,1,2,3,2)
td_add_grid_test(NAME moe_ep2_cp2 LABELS moe
  ARGS --deck ${TD_MOE_DECK} ${_ep2} ${TD_GRID_BIN} ${TD_MOE_WORK} moe_ep2_cp2 ${TD_GRID_REF}
       1,1,1,0,0,2)
td_add_grid_test(NAME moe_capacity_ep2 LABELS moe
  ARGS --deck ${TD_MOE_DECK} ${_ep2} ${TD_GRID_BIN} ${TD_MOE_WORK} moe_capacity_ep2
       ${TD_GRID_REF} 2,1,1,1,2 ${_cap})
td_add_grid_test(NAME moe_gpt2_ep2 LABELS moe
  ARGS ${_ep2} ${TD_GRID_BIN} ${TD_MOE_WORK} moe_gpt2_ep2 ${TD_GRID_REF} 2,1,1,0 ${TD_MOE_GPT2})
# bf16: routes part at near-ties as in moe_bf16_grid_dp2_zero3; measured on
# an AVX2 machine: loss 3.3e-5, grad_norm 9.5e-3 (step 13), the least loaded
# expert 2.6e-2, an expert's w2 6.1e-2 of its max: the parameters at 1e-1
td_add_grid_test(NAME moe_bf16_ep2_zero3 LABELS moe precision
  ARGS --moe-rtol 5e-2 --norm-rtol 2e-2 --param-rtol 1e-1 --deck ${TD_MOE_DECK} ${_ep2}
       ${TD_GRID_BIN} ${TD_MOE_WORK} moe_bf16_ep2_zero3 ${TD_GRID_REF} 2,1,1,3
       --set training.precision=bf16)

# The all-to-all through the device collectives' interface (TD_TEST_DCOMM=1:
# the test implementation, MPI_Ialltoallv joined as a stream would be, the
# code written for NCCL) bit for bit as through MPI, dp 2 × ep 2 at ZeRO-3.
td_add_grid_test(NAME moe_ep2_dcomm LABELS moe
  ARGS --bitwise --steps 10 --run-env TD_TEST_DCOMM=1 --deck ${TD_MOE_DECK} ${TD_GRID_BIN}
       ${TD_MOE_WORK} moe_ep2_dcomm 2,1,1,3 2,1,1,3 --set parallel.ep=2)

# Resharding with experts split (ep 4 -> ep 1 -> dp 2 × ep 2): a checkpoint
# saved at ep 4 resumed on one rank, and the one-rank checkpoint (the
# reference's, ep 1) resumed at dp 2 × ep 2, ZeRO-1 (the experts' moments
# read by their edp owners): steps 11-20 and the final parameters as the
# uninterrupted one-rank run's.
add_test(NAME moe_ckpt_reshard_ep4_to_1
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/e2e/ckpt_reshard.sh --src-set parallel.ep=4
          $<TARGET_FILE:trident> ${CMAKE_CURRENT_BINARY_DIR}/moe_ckpt reshard_ep4_to_1 4,1,1,0
          1,1,1,0)
add_test(NAME moe_ckpt_reshard_1_to_dp2_ep2
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/e2e/ckpt_reshard.sh --dst-set parallel.ep=2
          $<TARGET_FILE:trident> ${CMAKE_CURRENT_BINARY_DIR}/moe_ckpt reshard_1_to_dp2_ep2
          1,1,1,0 2,1,1,1)
set_tests_properties(moe_ckpt_reshard_ep4_to_1 moe_ckpt_reshard_1_to_dp2_ep2 PROPERTIES
  TIMEOUT 450 PROCESSORS 2 LABELS "e2e;mpi;checkpoint;moe"
  ENVIRONMENT "${TD_GRID_ENV};TD_DECK=${TD_MOE_DECK};TD_CKPT_LR=3.0e-4")
