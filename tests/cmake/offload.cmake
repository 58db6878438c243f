# offload.cmake — optimizer.offload: cpu (the fp32 masters and AdamW moments
# in host memory, AdamW on the CPU; parallel/zero.c "Offload").
#   - zero_offload: the ZeRO engine's unit test (tests/unit/test_zero.c) with
#     every engine offloading, every stage and space, at 1–3 ranks, and with
#     host staging (TD_TEST_STAGED=1) and device collectives (TD_TEST_DCOMM=1)
#     at 2: every check bit for bit as without offload, the host bytes 16 per
#     owned element;
#   - offload_needs_device: run.device: cpu with the key is exit 2 naming the
#     key and saying why;
#   - on the emulated device (label cudaemu, tests/e2e/offload.sh): offload
#     on against off, same grid, losses, grad norms, final parameters and
#     moments bit for bit — GPT-2 dp 2 ZeRO-1 fp32 with checkpoints crossing
#     (saved with offload resumed without, and the reverse, bit for bit);
#     GPT-2 one rank ZeRO-0 bf16 on a deck where the optimizer state
#     dominates and LLaMA dp 2 ZeRO-3 bf16, with the device memory (the
#     measured peak at least 0.9·12·Ψ/dp lower; `trident check` within 10%
#     of it); cudaemu_long: GPT-2 dp 2 ZeRO-3 bf16 (memory too), LLaMA dp 2
#     ZeRO-1 fp32, GPT-2 dp 2 ZeRO-2, dp 2 ZeRO-1 bf16 with both ranks on
#     one emulated device (collectives staged through MPI), pp 2 ZeRO-1 and
#     (staged) pp 2 ZeRO-2.
if(TARGET test_zero)
  td_add_mpi_test(NAME zero_offload COMMAND $<TARGET_FILE:test_zero> RANKS 1 2 3 TIMEOUT 120
    LABELS data_parallel)
  foreach(np 1 2 3)
    set_property(TEST zero_offload_np${np} APPEND PROPERTY ENVIRONMENT TD_TEST_OFFLOAD=1)
  endforeach()
  td_add_mpi_test(NAME zero_offload_staged COMMAND $<TARGET_FILE:test_zero> RANKS 2 TIMEOUT 120
    LABELS data_parallel staging)
  set_property(TEST zero_offload_staged_np2 APPEND PROPERTY ENVIRONMENT TD_TEST_OFFLOAD=1
    TD_TEST_STAGED=1)
  td_add_mpi_test(NAME zero_offload_dcomm COMMAND $<TARGET_FILE:test_zero> RANKS 2 TIMEOUT 120
    LABELS data_parallel staging)
  set_property(TEST zero_offload_dcomm_np2 APPEND PROPERTY ENVIRONMENT TD_TEST_OFFLOAD=1
    TD_TEST_DCOMM=1)
endif()

# (the key written in a deck, so the message names its file:line:column)
add_test(NAME offload_needs_device
  COMMAND sh -c "d=\"$2/offload_cpu.yaml\"; sed 's/^optimizer:$/optimizer:\\n  offload: cpu/' \"$1\" >\"$d\" && \"$0\" check \"$d\" 2>&1; echo \"exit status $?\""
          $<TARGET_FILE:trident> ${PROJECT_SOURCE_DIR}/inputs/tiny.yaml ${CMAKE_CURRENT_BINARY_DIR})
set_tests_properties(offload_needs_device PROPERTIES TIMEOUT 60 LABELS "deck"
  ENVIRONMENT "${TD_GRID_ENV}"
  PASS_REGULAR_EXPRESSION "offload_cpu.yaml:26:[0-9]+: optimizer.offload = cpu [^\n]*needs a device: run.device is cpu[^\n]*\nexit status 2")

if(TD_CUDA_EMULATE)
  set(_off_work ${CMAKE_CURRENT_BINARY_DIR}/cudaemu_offload)
  # offload_test(NAME LABELS GRID options and --set arguments...)
  function(td_offload_test name labels grid)
    add_test(NAME cudaemu_offload_${name}
      COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e/offload.sh ${ARGN}
              $<TARGET_FILE:trident> ${_off_work} ${name} ${grid})
    set_tests_properties(cudaemu_offload_${name} PROPERTIES TIMEOUT 600 PROCESSORS 2
      LABELS "e2e;${labels}" ENVIRONMENT "${TD_GRID_ENV};${TD_CUDAEMU_TEST_ENV}")
  endfunction()
  # tests/cudaemu/small.yaml at 4 sequences a step (2 per rank), one warm-up step
  set(_s --set training.global_batch=4 --set schedule.warmup=1)
  set(_llama --deck ${PROJECT_SOURCE_DIR}/inputs/llama-tiny.yaml --set model.layers=2
    --set model.seq_len=32)
  # in the cudaemu stage: both families, ZeRO 0, 1 and 3, fp32 and bf16,
  # checkpoints crossing, the memory
  td_offload_test(gpt2_dp2_zero1_ckpt cudaemu 2,1,1,1 --ckpt ${_s})
  # a deck where the optimizer state dominates the device memory: one rank,
  # ZeRO 0, bf16 (12 of its 18 bytes a parameter), dim 256, 16 tokens a row
  td_offload_test(gpt2_1rank_bf16_mem cudaemu 1,1,1,0 --mem --steps 2 ${_s}
    --set training.precision=bf16 --set model.dim=256 --set model.seq_len=16
    --set training.global_batch=2)
  td_offload_test(llama_dp2_zero3_bf16_mem cudaemu 2,1,1,3 --mem --steps 2 ${_llama} ${_s}
    --set training.precision=bf16)
  # expert parallelism (dp 2 × ep 2, ZeRO-1): both engines' AdamW on the host
  td_offload_test(moe_dp2_ep2_zero1 cudaemu 2,1,1,1 --steps 2
    --deck ${PROJECT_SOURCE_DIR}/inputs/moe-tiny.yaml --set model.seq_len=32 ${_s}
    --set parallel.ep=2)
  # cudaemu_long: the other combinations
  td_offload_test(gpt2_dp2_zero3_bf16_mem "cudaemu;cudaemu_long" 2,1,1,3 --mem --steps 2 ${_s}
    --set training.precision=bf16)
  td_offload_test(llama_dp2_zero1 "cudaemu;cudaemu_long" 2,1,1,1 ${_llama} ${_s})
  td_offload_test(gpt2_dp2_zero2 "cudaemu;cudaemu_long" 2,1,1,2 --steps 2 ${_s})
  # two ranks on one emulated device: the collectives staged through MPI (the
  # bf16 parameter all-gather of ZeRO-1 on host copies)
  td_offload_test(staged_dp2_zero1_bf16 "cudaemu;cudaemu_long" 2,1,1,1 --steps 2 ${_s}
    --set training.precision=bf16)
  set_property(TEST cudaemu_offload_staged_dp2_zero1_bf16 APPEND PROPERTY ENVIRONMENT
    TD_CUDAEMU_DEVICES=1)
  # pipelines (1F1B, 4 micro-batches): ZeRO-1, and ZeRO-2 (gradients streamed to
  # the host unit by unit) with the messages staged on one emulated device
  td_offload_test(pp2_zero1 "cudaemu;cudaemu_long" 1,1,2,1 --steps 2 ${_s}
    --set parallel.micro_batch=1)
  td_offload_test(staged_pp2_zero2 "cudaemu;cudaemu_long" 1,1,2,2 --steps 2 ${_s}
    --set parallel.micro_batch=1)
  set_property(TEST cudaemu_offload_staged_pp2_zero2 APPEND PROPERTY ENVIRONMENT
    TD_CUDAEMU_DEVICES=1)
endif()
