# cudaemu_grids.cmake — `run.device: cuda` trained end to end on the emulated
# device (a TD_CUDA_EMULATE build, label `cudaemu`): the CUDA back-end's
# kernels, cuBLASLt products, NCCL collectives and host staging, against
# `run.device: cpu` on the same grid through tests/e2e/grid_invariance.sh
# (the CPU run is the reference; losses and grad_norm within the bounds the
# CPU grids use: fp32 1e-4, bf16 the mixed-precision bounds of
# precision.cmake; final parameters per tensor).
#   - both families, fp32 and bf16, on 1 rank; recomputation; mixture of
#     experts on 1 rank (dropless and with a capacity) and at tp 2 with
#     sequence parallelism;
#   - dp 2 ZeRO-1 and ZeRO-3, tp 2 (and with sequence parallelism), pp 2 (1F1B, zb-h1, interleaved),
#     (tp 2, pp 2) (stage messages scattered over tp), pp 2 with an empty first stage,
#     (dp 2, tp 2) ZeRO-3 bf16: one
#     emulated device per rank (the default), so the collectives take the
#     NCCL path (the emulated NCCL between the ranks' processes);
#   - dp 2 on one emulated device (TD_CUDAEMU_DEVICES=1): NCCL refuses two
#     ranks of a communicator on one GPU, so trident stages through MPI;
#   - checkpoints: saved on the emulated GPU and resumed on the CPU, and the
#     reverse (tests/e2e/ckpt_reshard.sh on tests/cudaemu/small.yaml: the
#     saved parameters, the continued curve and the final parameters against
#     the uninterrupted CPU run), and the parameters read back bit for bit on
#     the other device (tests/e2e/ckpt_device_readback.sh).
if(TD_CUDA_EMULATE)
  # cudaemu_device.cmake's small model (2 layers, T 32, 4 sequences a step, 4
  # steps; one evaluation window): every device thread is a fiber, under
  # AddressSanitizer, so the grids stay small
  # Bounds: losses and grad_norm as the CPU grids (fp32 1e-4; bf16 the
  # mixed-precision bounds of precision.cmake). Final parameters after 4
  # AdamW steps: within 5e-3 (fp32) and 0.5 (bf16) of each tensor's
  # max|p_ref|. AdamW turns a rounding-sized gradient into a step-sized update
  # (±lr whatever its size), so where a gradient is near zero the two
  # back-ends' summation orders can flip one update; a tensor that started at
  # zero (biases) holds only 4 updates, so one flipped update is a large
  # fraction of it (measured: 2.2e-3 fp32 at tp 2, 0.21 bf16 on one rank,
  # both on c_attn/c_proj biases, with losses equal to 2e-5). bf16: 0.5 —
  # on a CPU with bf16 instructions (AVX512-BF16) the CPU reference's
  # products round differently from the device's, and the same bias moved
  # 0.36 (one rank) and 0.34 (dp 2 × tp 2) of its max, losses within 2e-5.
  set(_cu_work ${CMAKE_CURRENT_BINARY_DIR}/cudaemu_grid)
  set(_cu ${TD_CUDAEMU_TRAIN} --param-rtol 5e-3)
  set(_small ${TD_CUDAEMU_SMALL} --set eval.batches=1)
  set(_bf16 --set training.precision=bf16)
  set(_bf16_tol --norm-rtol 3e-3 --param-rtol 0.5)
  set(_bf16_tol_tp --loss-rtol 1e-3 --norm-rtol 1e-2 --param-rtol 0.5)
  set(_llama --deck ${PROJECT_SOURCE_DIR}/inputs/llama-tiny.yaml)
  set(_cu_tests "")
  # td_cudaemu_grid(NAME grid_invariance.sh arguments...)
  macro(td_cudaemu_grid name)
    td_add_grid_test(NAME cudaemu_${name} LABELS cudaemu TIMEOUT 600 ARGS ${ARGN})
    list(APPEND _cu_tests cudaemu_${name})
  endmacro()
  td_cudaemu_grid(gpt2_1rank_bf16 ${_cu} ${_bf16_tol}
    ${TD_GRID_BIN} ${_cu_work} gpt2_1rank_bf16 1,1,1,0 1,1,1,0 ${_small} ${_bf16})
  td_cudaemu_grid(llama_1rank ${_cu} ${_llama}
    ${TD_GRID_BIN} ${_cu_work} llama_1rank 1,1,1,0 1,1,1,0 ${_small})
  td_cudaemu_grid(llama_1rank_bf16 ${_cu} ${_llama} ${_bf16_tol}
    ${TD_GRID_BIN} ${_cu_work} llama_1rank_bf16 1,1,1,0 1,1,1,0 ${_small} ${_bf16})
  td_cudaemu_grid(gpt2_recompute ${_cu} ${TD_GRID_BIN} ${_cu_work} gpt2_recompute 1,1,1,0 1,1,1,0
    ${_small} --set training.recompute=blocks)
  td_cudaemu_grid(llama_recompute ${_cu} ${_llama}
    ${TD_GRID_BIN} ${_cu_work} llama_recompute 1,1,1,0 1,1,1,0 ${_small} --set training.recompute=blocks)
  td_cudaemu_grid(dp2_zero1 ${_cu} ${TD_GRID_BIN} ${_cu_work} dp2_zero1 1,1,1,0 2,1,1,1 ${_small})
  td_cudaemu_grid(dp2_zero3 ${_cu} ${TD_GRID_BIN} ${_cu_work} dp2_zero3 1,1,1,0 2,1,1,3 ${_small})
  # the parameters gathered unit by unit on the device collectives
  # (parallel.overlap_param_gather, the default) against all at once after
  # the optimizer: bit for bit, in bf16 at ZeRO 2 (ZeRO 1 is dp2_zero1 above)
  td_cudaemu_grid(dp2_zero2_gather --steps 4 --bitwise
    --run-set parallel.overlap_param_gather=false
    ${TD_GRID_BIN} ${_cu_work} dp2_zero2_gather 2,1,1,2 2,1,1,2 ${_small} ${_bf16}
    --set run.device=cuda)
  td_cudaemu_grid(llama_dp2_zero3 ${_cu} ${_llama}
    ${TD_GRID_BIN} ${_cu_work} llama_dp2_zero3 1,1,1,0 2,1,1,3 ${_small})
  td_cudaemu_grid(tp2 ${_cu} ${TD_GRID_BIN} ${_cu_work} tp2 1,1,1,0 1,2,1,0 ${_small})
  td_cudaemu_grid(llama_tp2 ${_cu} ${_llama} ${TD_GRID_BIN} ${_cu_work} llama_tp2 1,1,1,0 1,2,1,0
    ${_small})
  # pp 2 at ZeRO-2 (the tied embedding's gradient summed over the first and
  # last stage every micro-batch) with one sequence a micro-batch: a
  # device-wide wait in the step (cudaFree of an outgrown workspace) used to
  # deadlock against a pipeline send waiting on its own channel stream
  td_cudaemu_grid(pp2_1f1b ${_cu} ${TD_GRID_BIN} ${_cu_work} pp2_1f1b 1,1,1,0 1,1,2,2,1 ${_small})
  # the other pipeline schedules on the device path (messages on the NCCL
  # channels, one communicator per direction of each link)
  td_cudaemu_grid(pp2_zbh1 ${_cu} --run-set parallel.pp_schedule=zb-h1
    ${TD_GRID_BIN} ${_cu_work} pp2_zbh1 1,1,1,0 1,1,2,1,1 ${_small})
  td_cudaemu_grid(pp2_interleaved ${_cu} --run-set parallel.pp_schedule=interleaved
    --run-set parallel.virtual_stages=2
    ${TD_GRID_BIN} ${_cu_work} pp2_interleaved 1,1,1,0 1,1,2,1,1 ${_small} --set model.layers=4)
  # (tp 2, pp 2): each tp rank sends half of a stage message on its channel,
  # the receivers all-gather it over tp (NCCL all-gather in place)
  td_cudaemu_grid(tp2_pp2 ${_cu} ${TD_GRID_BIN} ${_cu_work} tp2_pp2 1,1,1,0 1,2,2,1,1 ${_small})
  # an empty first stage (the embedding alone; Llama 3's layout)
  td_cudaemu_grid(pp2_empty_first ${_cu} --run-set parallel.stage_layers=[0,2]
    ${TD_GRID_BIN} ${_cu_work} pp2_empty_first 1,1,1,0 1,1,2,1,1 ${_small})
  td_cudaemu_grid(221_zero3_bf16 ${_cu} ${_bf16_tol_tp}
    ${TD_GRID_BIN} ${_cu_work} 221_zero3_bf16 1,1,1,0 2,2,1,3 ${_small} ${_bf16})
  td_cudaemu_grid(staged_dp2_one_device ${_cu} --run-env TD_CUDAEMU_DEVICES=1
    ${TD_GRID_BIN} ${_cu_work} staged_dp2 1,1,1,0 2,1,1,1 ${_small})
  # sequence parallelism on the device: NCCL reduce-scatters and all-gathers
  # (the emulated NCCL) in place of the tp all-reduces
  td_cudaemu_grid(tp2_sp ${_cu} --run-set parallel.sequence_parallel=true
    ${TD_GRID_BIN} ${_cu_work} tp2_sp 1,1,1,0 1,2,1,0 ${_small})
  # context parallelism on the device: keys and values gathered over the cp
  # group by NCCL all-gathers, their gradients reduce-scattered; positions
  # (RoPE, GQA's causal mask) of the rank's two chunks
  td_cudaemu_grid(llama_cp2 ${_cu} ${_llama}
    ${TD_GRID_BIN} ${_cu_work} llama_cp2 1,1,1,0 1,1,1,0,0,2 ${_small})
  # Every grid above runs the defaults, the fused attention
  # (kernels/cuda/flash.cu) and the fused head; here T 80 (two row tiles of
  # the device kernels) with the head in chunks of 56 rows (a short last
  # chunk), LLaMA (grouped-query heads) on one rank in fp32 and bf16 (the
  # forward's output kept in bf16 feeds the backward's D), and at cp 2 (the
  # kernels' positions); and the materialized attention and head (the
  # reference kernels) on one rank
  set(_fused --set model.seq_len=80 --set model.head_chunk=56)
  td_cudaemu_grid(materialized_gpt2_1rank ${_cu}
    ${TD_GRID_BIN} ${_cu_work} materialized_gpt2_1rank 1,1,1,0 1,1,1,0 ${_small}
    --set model.attention=materialized --set model.head=materialized)
  td_cudaemu_grid(fused_llama_1rank ${_cu} ${_llama}
    ${TD_GRID_BIN} ${_cu_work} fused_llama_1rank 1,1,1,0 1,1,1,0 ${_small} ${_fused})
  td_cudaemu_grid(fused_gpt2_1rank_bf16 ${_cu} ${_bf16_tol}
    ${TD_GRID_BIN} ${_cu_work} fused_gpt2_1rank_bf16 1,1,1,0 1,1,1,0 ${_small} ${_bf16} ${_fused})
  td_cudaemu_grid(fused_llama_cp2 ${_cu} ${_llama}
    ${TD_GRID_BIN} ${_cu_work} fused_llama_cp2 1,1,1,0 1,1,1,0,0,2 ${_small} ${_fused})
  # mixture of experts (inputs/moe-tiny.yaml, 2 layers: block 1 sparse): the
  # router, the experts' order and the grouped products (kernels/cuda/moe.cu,
  # one cuBLASLt product per expert) on one rank, and at tp 2 with sequence
  # parallelism (the mixing weights' gradient summed over tp, the router's
  # input gathered, by the emulated NCCL)
  set(_moe --deck ${PROJECT_SOURCE_DIR}/inputs/moe-tiny.yaml)
  td_cudaemu_grid(moe_1rank ${_cu} ${_moe}
    ${TD_GRID_BIN} ${_cu_work} moe_1rank 1,1,1,0 1,1,1,0 ${_small})
  td_cudaemu_grid(moe_tp2_sp ${_cu} ${_moe} --run-set parallel.sequence_parallel=true
    ${TD_GRID_BIN} ${_cu_work} moe_tp2_sp 1,1,1,0 1,2,1,0 ${_small})
  # GPT-2's experts (biases; c_proj's added on tp rank 0) at tp 2
  td_cudaemu_grid(moe_gpt2_tp2 ${_cu} ${TD_GRID_BIN} ${_cu_work} moe_gpt2_tp2 1,1,1,0 1,2,1,0
    ${_small} --set model.moe.experts=4 --set model.moe.ffn_dim=96)
  # expert parallelism at dp 2 × ep 2, ZeRO-1: the tokens' all-to-all through
  # the device all-to-all (grouped ncclSend/ncclRecv of the emulated NCCL,
  # this rank's own rows copied on the communication stream), the experts'
  # engine over its own NCCL communicator; cuda = cpu on the same grid
  td_cudaemu_grid(moe_dp2_ep2 ${_cu} ${_moe}
    ${TD_GRID_BIN} ${_cu_work} moe_dp2_ep2 2,1,1,1 2,1,1,1 ${_small} --set parallel.ep=2)
  # ... and both ranks on one emulated device: no NCCL between them, so the
  # all-to-all goes through MPI on host copies of the rows (ep_stage)
  td_cudaemu_grid(moe_ep2_staged ${_cu} ${_moe} --run-env TD_CUDAEMU_DEVICES=1
    ${TD_GRID_BIN} ${_cu_work} moe_ep2_staged 2,1,1,3 2,1,1,3 ${_small} --set parallel.ep=2)
  # with a capacity: the plan made on the host and copied to the device
  td_cudaemu_grid(moe_capacity ${_cu} ${_moe}
    ${TD_GRID_BIN} ${_cu_work} moe_capacity 1,1,1,0 1,1,1,0 ${_small}
    --set model.moe.capacity_factor=1.0)
  # packed chat data (data.attend: document, a loss mask): the device's
  # document masks in the fused attention, positions restarting in the
  # embedding (its wpe gradient by the documents' kernel) and in RoPE, and
  # masked targets (-1) in the cross-entropy, against the CPU on one rank
  add_test(NAME cudaemu_chat_data COMMAND bash -c
    "/usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/e2e/make_chat.py chat.jsonl 300 5 && $<TARGET_FILE:trident> prepare --format chat --out chat.h5 chat.jsonl"
    WORKING_DIRECTORY ${_cu_work})
  file(MAKE_DIRECTORY ${_cu_work})
  # (data preparation, not a test of trident's memory: MPICH's own
  # allocations at exit are not checked here, as tests/sanitize/lsan.supp
  # does for the sanitizer subset)
  set_tests_properties(cudaemu_chat_data PROPERTIES LABELS cudaemu FIXTURES_SETUP cudaemu_chat
    ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0")
  set(_chat --set data.train=${_cu_work}/chat.h5 --set data.attend=document)
  td_cudaemu_grid(packing_gpt2 ${_cu}
    ${TD_GRID_BIN} ${_cu_work} packing_gpt2 1,1,1,0 1,1,1,0 ${_small} ${_chat})
  td_cudaemu_grid(packing_llama ${_cu} ${_llama}
    ${TD_GRID_BIN} ${_cu_work} packing_llama 1,1,1,0 1,1,1,0 ${_small} ${_chat})
  set_tests_properties(cudaemu_packing_gpt2 cudaemu_packing_llama PROPERTIES
    FIXTURES_REQUIRED cudaemu_chat)
  set_property(TEST ${_cu_tests} APPEND PROPERTY ENVIRONMENT ${TD_CUDAEMU_TEST_ENV})
  # Seeded random delays: before each queued operation a stream's worker
  # sleeps a delay drawn in [0, 100] us for that (stream, operation), so an
  # operation that should have waited for another stream's work runs while
  # that work is still pending, differently in each test; the seed also
  # sets the order the emulated threads and blocks run in. Two seeds, one
  # for every other grid (both seeds in every CI run, no extra time); one
  # test under another seed: TD_CUDAEMU_SEED=7 ctest -R cudaemu_tp2 after
  # editing, or any test with the variables below.
  set(_seed 1)
  foreach(t ${_cu_tests})
    set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT
      TD_CUDAEMU_DELAY_US=100 TD_CUDAEMU_DELAY_RANDOM=1 TD_CUDAEMU_SEED=${_seed})
    math(EXPR _seed "3 - ${_seed}")
  endforeach()
  # the parameters cross devices bit for bit (train --dump of the resumed run)
  add_test(NAME cudaemu_ckpt_readback
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e/ckpt_device_readback.sh $<TARGET_FILE:trident>
            ${CMAKE_CURRENT_BINARY_DIR}/cudaemu_readback ${PROJECT_SOURCE_DIR}/tests/cudaemu/small.yaml)
  set_tests_properties(cudaemu_ckpt_readback PROPERTIES TIMEOUT 600 PROCESSORS 1
    LABELS "e2e;checkpoint;cudaemu" ENVIRONMENT "${TD_GRID_ENV};${TD_CUDAEMU_TEST_ENV}")
  # asynchronous saves from the device: pinned staging filled on the copy
  # stream, the same files as synchronous saves, resumed bit for bit
  add_test(NAME cudaemu_ckpt_async
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e/ckpt_async.sh $<TARGET_FILE:trident>
            ${CMAKE_CURRENT_BINARY_DIR}/cudaemu_async 2,1,1,1 --set run.device=cuda)
  set_tests_properties(cudaemu_ckpt_async PROPERTIES TIMEOUT 600 PROCESSORS 2
    LABELS "e2e;checkpoint;cudaemu"
    ENVIRONMENT "${TD_GRID_ENV};${TD_CUDAEMU_TEST_ENV};TD_DECK=${PROJECT_SOURCE_DIR}/tests/cudaemu/small.yaml;TD_ASYNC_PARTS=2")
  foreach(dir gpu_to_cpu cpu_to_gpu)
    if(dir STREQUAL gpu_to_cpu)
      set(_side --src-set run.device=cuda)
    else()
      set(_side --dst-set run.device=cuda)
    endif()
    # the two back-ends sum in other orders: on an AVX2 CPU a parameter was
    # 1.5e-5 of its tensor's max from the CPU's after 10 steps (bound 1e-5)
    # and 3.3e-4 after 20 (bound 3e-4), so 3e-5 and 1e-3 here
    add_test(NAME cudaemu_ckpt_${dir}
      COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e/ckpt_reshard.sh ${_side} --gb 4 --src-rtol 3e-5
              --param-rtol 1e-3
              $<TARGET_FILE:trident> ${CMAKE_CURRENT_BINARY_DIR}/cudaemu_ckpt ${dir} 1,1,1,0 1,1,1,0)
    set_tests_properties(cudaemu_ckpt_${dir} PROPERTIES TIMEOUT 600 PROCESSORS 1 # one rank each side
      LABELS "e2e;checkpoint;cudaemu"
      ENVIRONMENT "${TD_GRID_ENV};${TD_CUDAEMU_TEST_ENV};TD_DECK=${PROJECT_SOURCE_DIR}/tests/cudaemu/small.yaml")
  endforeach()
endif()
