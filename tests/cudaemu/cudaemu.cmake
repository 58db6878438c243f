# cudaemu.cmake — the CUDA back-end module (libtrident_cuda.so) built for the
# emulated CUDA device (TD_CUDA_EMULATE=ON; included by the top-level
# CMakeLists.txt): the same kernels/cuda sources, rewritten by rewrite.py
# (<<<>>> launches, __shared__) and compiled as C++17 by the host compiler
# against tests/cudaemu/include, linked with the emulator's runtime and
# library stand-ins (every tests/cudaemu/src/*.cpp). No nvcc, no CUDA
# toolkit, no GPU. The module loads through the registry's usual dlopen
# path. Test builds only: a real build never includes this file.
enable_language(CXX)
find_package(Python3 REQUIRED COMPONENTS Interpreter)

set(TD_CUDAEMU_DIR ${PROJECT_SOURCE_DIR}/tests/cudaemu)
set(TD_CUDAEMU_GEN ${CMAKE_BINARY_DIR}/cudaemu_src) # the rewritten sources, first on the path

# td_cudaemu_rewrite(OUT_VAR SOURCE...) — a build rule per CUDA source:
# SOURCE (under the project) -> TD_CUDAEMU_GEN/<same path>, .cu as .cpp.
function(td_cudaemu_rewrite out_var)
  set(outs "")
  foreach(src ${ARGN})
    file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR} ${src})
    string(REGEX REPLACE "\\.cu$" ".cpp" rel ${rel})
    set(out ${TD_CUDAEMU_GEN}/${rel})
    add_custom_command(OUTPUT ${out}
      COMMAND ${Python3_EXECUTABLE} ${TD_CUDAEMU_DIR}/rewrite.py ${src} ${out}
      DEPENDS ${src} ${TD_CUDAEMU_DIR}/rewrite.py
      COMMENT "cudaemu: rewriting ${rel}" VERBATIM)
    list(APPEND outs ${out})
  endforeach()
  set(${out_var} ${outs} PARENT_SCOPE)
endfunction()

# The emulator: runtime, kernel execution, cub, and the cuBLASLt and NCCL
# stand-ins (whatever .cpp files tests/cudaemu/src holds).
file(GLOB TD_CUDAEMU_RT_SRC CONFIGURE_DEPENDS ${TD_CUDAEMU_DIR}/src/*.cpp)
add_library(cudaemu_rt OBJECT ${TD_CUDAEMU_RT_SRC})
set_target_properties(cudaemu_rt PROPERTIES POSITION_INDEPENDENT_CODE ON CXX_STANDARD 17
  CXX_STANDARD_REQUIRED ON CXX_EXTENSIONS OFF)
target_include_directories(cudaemu_rt BEFORE PUBLIC ${TD_CUDAEMU_DIR}/include)
# device arithmetic is IEEE float by float, as nvcc's __f*_rn are: no FMA
# contraction behind the code's back
target_compile_options(cudaemu_rt PUBLIC -ffp-contract=off
  PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${TD_WARN}>)
target_link_libraries(cudaemu_rt PUBLIC Threads::Threads ${CMAKE_DL_LIBS})
target_link_libraries(cudaemu_rt PUBLIC rt) # the NCCL stand-in's POSIX shared memory
if(EXISTS ${TD_CUDAEMU_DIR}/src/nccl.cpp)
  set(TD_CUDAEMU_NCCL ON)
else()
  set(TD_CUDAEMU_NCCL OFF)
endif()

file(GLOB TD_CUDA_CU CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/kernels/cuda/*.cu
  ${PROJECT_SOURCE_DIR}/kernels/cuda/*.cuh)
td_cudaemu_rewrite(TD_CUDAEMU_MODULE_SRC ${TD_CUDA_CU})
add_library(trident_cuda MODULE ${TD_CUDAEMU_MODULE_SRC})
set_target_properties(trident_cuda PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}
  PREFIX "lib" CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON CXX_EXTENSIONS OFF)
target_include_directories(trident_cuda BEFORE PRIVATE ${TD_CUDAEMU_GEN})
target_include_directories(trident_cuda PRIVATE ${PROJECT_SOURCE_DIR}
  ${PROJECT_SOURCE_DIR}/common ${CMAKE_BINARY_DIR})
target_compile_definitions(trident_cuda PRIVATE TD_CUDA_EMULATED _GNU_SOURCE)
if(TD_CUDAEMU_NCCL)
  target_compile_definitions(trident_cuda PRIVATE TD_HAVE_NCCL)
endif()
target_compile_options(trident_cuda PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${TD_WARN}>)
target_link_libraries(trident_cuda PRIVATE cudaemu_rt)

# The environment of the tests on the emulated device: TD_CUDAEMU=1 (a
# device is expected: a module that does not load fails the kernel test)
# and, in sanitizer builds, the sanitizer subset's settings (leaks checked,
# stack-use-after-return through the fibers' fake stacks).
set(TD_CUDAEMU_TEST_ENV TD_CUDAEMU=1)
if(TD_SANITIZE)
  list(APPEND TD_CUDAEMU_TEST_ENV
    "ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=1"
    "LSAN_OPTIONS=suppressions=${PROJECT_SOURCE_DIR}/tests/sanitize/lsan.supp:print_suppressions=0"
    "UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1")
endif()
