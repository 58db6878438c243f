# kernels — the CPU back-end against float64 references and finite differences.
td_add_unit(test_kernels ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_kernels.c)
add_test(NAME kernels COMMAND test_kernels)
set_tests_properties(kernels PROPERTIES TIMEOUT 60 PROCESSORS 2 LABELS "unit;kernels"
  ENVIRONMENT "OMP_NUM_THREADS=2")

# kernels_bf16 — the bf16 ops (casts, gemm with bf16 operands, the pointwise
# ops reading bf16 parameters or writing bf16 activations) against float64
# within bounds derived from bf16 rounding (stated in the file), on the
# native and the widened matmul path. 77 (skipped) on a CBLAS build.
td_add_unit(test_kernels_bf16 ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_kernels_bf16.c)
add_test(NAME kernels_bf16 COMMAND test_kernels_bf16)
set_tests_properties(kernels_bf16 PROPERTIES TIMEOUT 60 PROCESSORS 2 LABELS "unit;kernels;precision"
  SKIP_RETURN_CODE 77 ENVIRONMENT "OMP_NUM_THREADS=2")

# kernels_cuda — every op of the CUDA back-end against the CPU back-end
# (bounds in the file), and the row reductions bitwise deterministic. Label
# `device`: 77 (skipped) where no GPU is visible; registered only in builds
# with the CUDA back-end.
if(TD_ENABLE_CUDA)
  td_add_unit(test_kernels_cuda ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_kernels_cuda.c)
  add_test(NAME kernels_cuda COMMAND test_kernels_cuda)
  set_tests_properties(kernels_cuda PROPERTIES TIMEOUT 120 PROCESSORS 2
    LABELS "unit;kernels;device" SKIP_RETURN_CODE 77 ENVIRONMENT "OMP_NUM_THREADS=2")
  if(TD_CUDA_EMULATE) # on the emulated device (tests/cudaemu), which must load: TD_CUDAEMU=1
    set_property(TEST kernels_cuda APPEND PROPERTY LABELS cudaemu)
    set_property(TEST kernels_cuda APPEND PROPERTY ENVIRONMENT ${TD_CUDAEMU_TEST_ENV})
  endif()
endif()

# flash — the fused (flash) attention of the CPU back-end against a float64
# reference from the definition (and finite differences), the materialised
# kernels, and itself at 1-3 threads (bitwise); odd T, head sizes 24 and 80,
# kv_heads 1/2/heads, cp positions, document masks, a bf16 output.
td_add_unit(test_flash ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_flash.c)
add_test(NAME flash COMMAND test_flash cpu)
set_tests_properties(flash PROPERTIES TIMEOUT 120 PROCESSORS 2 LABELS "unit;kernels"
  ENVIRONMENT "OMP_NUM_THREADS=2")
# the register blocks of the other kind of machine (kernels/cpu/flash.c:
# wide for AVX-512's 32 registers, narrow for AVX2's 16): both on every machine
foreach(_blocks wide narrow)
  add_test(NAME flash_blocks_${_blocks} COMMAND test_flash cpu)
  set_tests_properties(flash_blocks_${_blocks} PROPERTIES TIMEOUT 120 PROCESSORS 2
    LABELS "unit;kernels" ENVIRONMENT "OMP_NUM_THREADS=2;TD_TEST_FLASH_BLOCKS=${_blocks}")
endforeach()

# flash_cuda — the same checks of test_flash on the CUDA back-end's fused
# kernels (kernels/cuda/flash.cu). Label `device`: 77 without a GPU; on the
# emulated device (cudaemu) it runs in CI.
if(TD_ENABLE_CUDA)
  add_test(NAME flash_cuda COMMAND test_flash cuda)
  set_tests_properties(flash_cuda PROPERTIES TIMEOUT 300 PROCESSORS 2
    LABELS "unit;kernels;device" SKIP_RETURN_CODE 77 ENVIRONMENT "OMP_NUM_THREADS=2")
  if(TD_CUDA_EMULATE)
    set_property(TEST flash_cuda APPEND PROPERTY LABELS cudaemu)
    set_property(TEST flash_cuda APPEND PROPERTY ENVIRONMENT ${TD_CUDAEMU_TEST_ENV})
  endif()
endif()

# moe — the mixture-of-experts ops (router, its backward, the experts' order
# with a capacity, the row gathers and sums) of the CPU back-end against a
# float64 reference written from Mixtral's and Switch's definitions, central
# differences for the router's backward, ties, and 1 vs 2 threads (bitwise).
td_add_unit(test_moe ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_moe.c)
add_test(NAME moe_kernels COMMAND test_moe cpu)
set_tests_properties(moe_kernels PROPERTIES TIMEOUT 60 PROCESSORS 2 LABELS "unit;kernels"
  ENVIRONMENT "OMP_NUM_THREADS=2")

# moe_kernels_cuda — the same checks on the CUDA back-end (kernels/cuda/moe.cu).
# Label `device`: 77 without a GPU; on the emulated device (cudaemu) in CI.
if(TD_ENABLE_CUDA)
  add_test(NAME moe_kernels_cuda COMMAND test_moe cuda)
  set_tests_properties(moe_kernels_cuda PROPERTIES TIMEOUT 300 PROCESSORS 2
    LABELS "unit;kernels;device" SKIP_RETURN_CODE 77 ENVIRONMENT "OMP_NUM_THREADS=2")
  if(TD_CUDA_EMULATE)
    set_property(TEST moe_kernels_cuda APPEND PROPERTY LABELS cudaemu)
    set_property(TEST moe_kernels_cuda APPEND PROPERTY ENVIRONMENT ${TD_CUDAEMU_TEST_ENV})
  endif()
endif()
