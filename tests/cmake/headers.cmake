# headers.cmake — every public header compiles on its own (issue 18): one
# generated translation unit per header that includes nothing else, built as
# the object library td_header_check with the library's flags, by the CTest
# test `headers_standalone` (so the next MPI, compiler or libc that includes
# less than MPICH's mpi.h does shows which header forgot an include). The
# headers of kernels/ and common/ — what the CUDA files may include — are
# also compiled as C++ (their extern "C" guards and C-only constructs), when a
# C++ compiler is found; kernels/cuda/td_cuda.h only in CUDA builds.
file(GLOB TD_HEADERS RELATIVE ${PROJECT_SOURCE_DIR} CONFIGURE_DEPENDS
  ${PROJECT_SOURCE_DIR}/app/*/*.h ${PROJECT_SOURCE_DIR}/io/*.h ${PROJECT_SOURCE_DIR}/parallel/*.h
  ${PROJECT_SOURCE_DIR}/kernels/*.h ${PROJECT_SOURCE_DIR}/kernels/cpu/*.h
  ${PROJECT_SOURCE_DIR}/common/*.h)
if(TD_ENABLE_CUDA)
  list(APPEND TD_HEADERS kernels/cuda/td_cuda.h)
endif()
include(CheckLanguage)
check_language(CXX)
if(CMAKE_CXX_COMPILER)
  enable_language(CXX)
endif()
set(TD_HEADER_TUS "")
foreach(h ${TD_HEADERS})
  string(REGEX REPLACE "[/.]" "_" flat ${h})
  set(tu ${CMAKE_CURRENT_BINARY_DIR}/header_check/${flat}.c)
  file(CONFIGURE OUTPUT ${tu} CONTENT "#include \"${h}\" /* alone, first */\nint td_header_check_${flat}(void);\nint td_header_check_${flat}(void) { return 0; }\n")
  list(APPEND TD_HEADER_TUS ${tu})
  if(CMAKE_CXX_COMPILER AND (h MATCHES "^kernels/" OR h MATCHES "^common/"))
    file(CONFIGURE OUTPUT ${tu}pp CONTENT "#include \"${h}\" // alone, first, as C++\n")
    list(APPEND TD_HEADER_TUS ${tu}pp)
  endif()
endforeach()
add_library(td_header_check OBJECT EXCLUDE_FROM_ALL ${TD_HEADER_TUS})
target_include_directories(td_header_check PRIVATE $<TARGET_PROPERTY:tdcore,INCLUDE_DIRECTORIES>)
target_compile_definitions(td_header_check PRIVATE $<TARGET_PROPERTY:tdcore,COMPILE_DEFINITIONS>)
target_link_libraries(td_header_check PRIVATE MPI::MPI_C PkgConfig::YAML OpenMP::OpenMP_C)
if(TD_ENABLE_DNNL)
  target_link_libraries(td_header_check PRIVATE DNNL::dnnl)
endif()
if(TD_ENABLE_CUDA)
  target_include_directories(td_header_check PRIVATE ${CUDAToolkit_INCLUDE_DIRS} ${NCCL_INCLUDE_DIR})
endif()
target_compile_options(td_header_check PRIVATE $<$<COMPILE_LANGUAGE:C>:${TD_WARN}>)
add_dependencies(td_header_check tdcore) # td_build.h is generated
add_test(NAME headers_standalone
  COMMAND ${CMAKE_COMMAND} --build ${CMAKE_BINARY_DIR} --target td_header_check)
set_tests_properties(headers_standalone PROPERTIES TIMEOUT 300 LABELS "build;portability")
