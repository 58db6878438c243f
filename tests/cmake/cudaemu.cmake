# cudaemu — tests of the emulated CUDA device (tests/cudaemu/), registered
# only in an emulated build (TD_CUDA_EMULATE). Label `cudaemu`.

# ---- library stand-ins: cuBLASLt and NCCL (tests/cudaemu/test_libs.cpp) ------------
# The test program is built from the emulation's sources directly (the module
# libtrident_cuda.so is a MODULE and cannot be linked): test_libs.cpp plus every
# tests/cudaemu/src/*.cpp. cudaemu_cublaslt: every transpose pair, row/column
# order, batches, float32/bf16, odd sizes against a float64 reference, each
# documented refusal, the speed of a training-sized product (printed only). cudaemu_nccl_npN:
# N forked processes, one emulated device each (the program sets
# TD_CUDAEMU_DEVICES=N and a 4 KiB chunk so every collective is chunked): every
# call, groups of unequal parts, the in-place rules, the duplicate-GPU refusal,
# abort, the init timeout.
if(TD_CUDA_EMULATE)
  if(NOT CMAKE_CXX_COMPILER_LOADED)
    enable_language(CXX)
  endif()
  find_package(Threads REQUIRED)
  file(GLOB TD_CUDAEMU_LIB_TEST_SRC CONFIGURE_DEPENDS
    ${CMAKE_SOURCE_DIR}/tests/cudaemu/src/*.cpp)
  add_executable(test_cudaemu_libs ${CMAKE_CURRENT_SOURCE_DIR}/cudaemu/test_libs.cpp
    ${TD_CUDAEMU_LIB_TEST_SRC})
  set_target_properties(test_cudaemu_libs PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON
    CXX_EXTENSIONS OFF)
  target_include_directories(test_cudaemu_libs PRIVATE
    ${CMAKE_SOURCE_DIR}/tests/cudaemu/include ${CMAKE_SOURCE_DIR}/tests/cudaemu/src)
  target_compile_options(test_cudaemu_libs PRIVATE -Wall -Wextra)
  target_link_libraries(test_cudaemu_libs PRIVATE Threads::Threads rt ${CMAKE_DL_LIBS})

  add_test(NAME cudaemu_cublaslt COMMAND test_cudaemu_libs blas)
  set_tests_properties(cudaemu_cublaslt PROPERTIES TIMEOUT 120 PROCESSORS 1
    LABELS "unit;cudaemu")
  foreach(np 1 2 3 4)
    add_test(NAME cudaemu_nccl_np${np} COMMAND test_cudaemu_libs nccl ${np})
    set_tests_properties(cudaemu_nccl_np${np} PROPERTIES TIMEOUT 120 PROCESSORS 2
      LABELS "unit;cudaemu")
  endforeach()
endif()
# ---- end of the library stand-ins' block ----------------------------------------------

# ---- WMMA (tests/cudaemu/test_wmma.cu) ----------------------------------------------------
# cudaemu_wmma: nvcuda::wmma on the emulated device (include/mma.h, src/wmma.cpp), a CUDA
# source rewritten and compiled like kernels/cuda (and compilable by nvcc): bf16 and tf32
# tiles in every layout against a float64 reference, accumulators loaded and stored both
# ways, shared-memory operands, a 64x64 product over 4 warps, __float_to_tf32, and each
# refusal (misaligned pointer, bad ldm, lanes disagreeing, skipping or exited, memory
# outside the device) with its message.
if(TD_CUDA_EMULATE)
  td_cudaemu_rewrite(TD_CUDAEMU_WMMA_SRC ${PROJECT_SOURCE_DIR}/tests/cudaemu/test_wmma.cu)
  add_executable(test_cudaemu_wmma ${TD_CUDAEMU_WMMA_SRC})
  set_target_properties(test_cudaemu_wmma PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON
    CXX_EXTENSIONS OFF)
  target_compile_options(test_cudaemu_wmma PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${TD_WARN}>)
  target_link_libraries(test_cudaemu_wmma PRIVATE cudaemu_rt)
  add_test(NAME cudaemu_wmma COMMAND test_cudaemu_wmma)
  set_tests_properties(cudaemu_wmma PROPERTIES TIMEOUT 120 PROCESSORS 1
    LABELS "unit;cudaemu" ENVIRONMENT "${TD_CUDAEMU_TEST_ENV}")
endif()
