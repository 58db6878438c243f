# cudaemu_device — the emulated CUDA device (tests/cudaemu/), registered only
# in an emulated build (TD_CUDA_EMULATE). Label `cudaemu`; tests/run.sh's
# `cudaemu` stage builds the target cudaemu_all and runs ctest -L cudaemu
# -LE cudaemu_long within its 6-minute budget: a test that takes more than
# ~30 s under AddressSanitizer on 2 cores carries `cudaemu_long` as well.
# (The library stand-ins' own tests are in cudaemu.cmake; kernels_cuda runs
# on the emulated device too, kernels.cmake.)
if(TD_CUDA_EMULATE)
  # cudaemu_runtime: the emulator checks itself (tests/cudaemu/test_runtime.cu,
  # rewritten and compiled like kernels/cuda): launch limits, barriers and
  # deadlocks, warp intrinsics, shared memory, stream and event ordering (with
  # TD_CUDAEMU_DELAY_US so a missing wait shows), copy and free rules, cub.
  # cudaemu_host_access: a host read of device memory dies with the
  # emulator's message naming the allocation. cudaemu_device_oob (sanitizer
  # builds): a kernel writing past an allocation is reported.
  td_cudaemu_rewrite(TD_CUDAEMU_TEST_SRC ${PROJECT_SOURCE_DIR}/tests/cudaemu/test_runtime.cu)
  add_executable(test_cudaemu_runtime ${TD_CUDAEMU_TEST_SRC})
  set_target_properties(test_cudaemu_runtime PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON
    CXX_EXTENSIONS OFF)
  target_include_directories(test_cudaemu_runtime PRIVATE ${PROJECT_SOURCE_DIR}/tests/cudaemu/src)
  target_compile_options(test_cudaemu_runtime PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${TD_WARN}>)
  target_link_libraries(test_cudaemu_runtime PRIVATE cudaemu_rt)

  add_test(NAME cudaemu_runtime COMMAND test_cudaemu_runtime)
  set_tests_properties(cudaemu_runtime PROPERTIES TIMEOUT 120 PROCESSORS 2
    LABELS "unit;cudaemu" ENVIRONMENT "${TD_CUDAEMU_TEST_ENV}")
  # (it dies by SIGABRT, or by AddressSanitizer's SEGV report: sh keeps
  # ctest from counting the signal; the output decides)
  add_test(NAME cudaemu_host_access
    COMMAND sh -c "\"$0\" host_access 2>&1; echo exit status $?" $<TARGET_FILE:test_cudaemu_runtime>)
  set_tests_properties(cudaemu_host_access PROPERTIES TIMEOUT 60 LABELS "unit;cudaemu"
    ENVIRONMENT "${TD_CUDAEMU_TEST_ENV}"
    PASS_REGULAR_EXPRESSION "cudaemu: host access to device memory at 0x[0-9a-f]+ \\(byte 12 of the allocation of 1024 bytes"
    FAIL_REGULAR_EXPRESSION "not caught")
  if(TD_SANITIZE MATCHES address)
    add_test(NAME cudaemu_device_oob COMMAND test_cudaemu_runtime oob)
    set_tests_properties(cudaemu_device_oob PROPERTIES TIMEOUT 60 LABELS "unit;cudaemu"
      ENVIRONMENT "${TD_CUDAEMU_TEST_ENV}"
      PASS_REGULAR_EXPRESSION "AddressSanitizer: use-after-poison.*past_end_kernel")
  endif()

  # trident on the emulated device: --version says so; run.device: cuda
  # trains a small GPT-2 like the CPU (grid_invariance.sh: the CPU run is the
  # reference; losses and grad norms within 1e-4, final parameters within
  # 2e-3 of each tensor's max — the back-ends sum in different orders, and
  # AdamW's first steps turn rounding-sized gradient differences into
  # step-sized ones), on one rank and on dp 2 (two emulated devices, the
  # NCCL stand-in).
  add_test(NAME cudaemu_version COMMAND trident --version)
  set_tests_properties(cudaemu_version PROPERTIES TIMEOUT 60 LABELS "cudaemu"
    ENVIRONMENT "HWLOC_PLUGINS_BLACKLIST=hwloc_pci;${TD_CUDAEMU_TEST_ENV}"
    PASS_REGULAR_EXPRESSION "cuda: emulated")
  # trident plan --calibrate --device cuda: the GPU calibration on 2
  # emulated devices (shapes divided by TD_TEST_CALIBRATE_SMALL, the device
  # reporting 4 SMs) gives a cluster file the planner uses, the links
  # measured through the NCCL stand-in
  add_test(NAME cudaemu_plan_calibrate
    COMMAND bash ${PROJECT_SOURCE_DIR}/tests/e2e/plan_calibrate_gpu.sh $<TARGET_FILE:trident>
            ${CMAKE_CURRENT_BINARY_DIR}/cudaemu_plan_calibrate 2)
  set_tests_properties(cudaemu_plan_calibrate PROPERTIES TIMEOUT 300 PROCESSORS 2
    LABELS "cudaemu;plan;mpi"
    ENVIRONMENT "HWLOC_PLUGINS_BLACKLIST=hwloc_pci;MPIEXEC=${MPIEXEC_EXECUTABLE};TD_CUDAEMU_SMS=4;TD_TEST_CALIBRATE_SMALL=1;${TD_CUDAEMU_TEST_ENV}")
  set(TD_CUDAEMU_TRAIN --steps 4 --param-rtol 2e-3 --run-set run.device=cuda)
  set(TD_CUDAEMU_SMALL --set model.layers=2 --set model.seq_len=32
    --set training.global_batch=4 --set schedule.warmup=1)
  td_add_grid_test(NAME cudaemu_train_vs_cpu TIMEOUT 300 LABELS cudaemu
    ARGS ${TD_CUDAEMU_TRAIN} ${TD_GRID_BIN} ${TD_GRID_WORK} cudaemu_train_vs_cpu
         1,1,1,0 1,1,1,0 ${TD_CUDAEMU_SMALL})
  td_add_grid_test(NAME cudaemu_train_dp2_vs_cpu TIMEOUT 300 LABELS cudaemu
    ARGS ${TD_CUDAEMU_TRAIN} ${TD_GRID_BIN} ${TD_GRID_WORK} cudaemu_train_dp2_vs_cpu
         1,1,1,0 2,1,1,0 ${TD_CUDAEMU_SMALL})
  set_property(TEST cudaemu_train_vs_cpu cudaemu_train_dp2_vs_cpu APPEND PROPERTY ENVIRONMENT
    ${TD_CUDAEMU_TEST_ENV})

  # everything the label needs, for a build of only that (tests/run.sh)
  add_custom_target(cudaemu_all)
  add_dependencies(cudaemu_all trident trident_cuda test_kernels_cuda test_cudaemu_runtime
    test_cudaemu_wmma)
  if(TARGET test_cudaemu_libs)
    add_dependencies(cudaemu_all test_cudaemu_libs)
  endif()
endif()
