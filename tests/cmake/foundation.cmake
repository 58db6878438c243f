# foundation.cmake — the job deck, the process grid, error agreement and the
# command line: bad decks must fail cleanly (one message, exit 2, every rank
# count), the example decks must pass `trident check`, the grid's
# communicators must be right at 1, 2, 4 and 8 ranks, a rank failing alone must
# end the job, and the help/version/schema output must hold.
#
# The deck scripts run from the source root: decks name relative paths.
set(TD_FOUNDATION_ENV "OMP_NUM_THREADS=1;HWLOC_PLUGINS_BLACKLIST=hwloc_pci")
set(TD_DECKS ${CMAKE_CURRENT_SOURCE_DIR}/decks)

foreach(t bad_decks good_decks inject cli)
  if(t STREQUAL "inject")
    set(script run_inject.sh)
    set(timeout 60)
  else()
    set(script run_${t}.sh)
    set(timeout 600)
  endif()
  add_test(NAME ${t}
    COMMAND bash ${TD_DECKS}/${script} $<TARGET_FILE:trident> ${MPIEXEC_EXECUTABLE}
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(${t} PROPERTIES TIMEOUT ${timeout} PROCESSORS 2
    LABELS "foundation;mpi" ENVIRONMENT "${TD_FOUNDATION_ENV}")
endforeach()

td_add_unit(test_grid ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_grid.c)
td_add_mpi_test(NAME grid COMMAND $<TARGET_FILE:test_grid> RANKS 1 2 4 8 TIMEOUT 60
  LABELS foundation)

# layering: the layers and app/'s parts point one way (docs/architecture.md,
# "Layers and parts"): includes between parts, no include circle, and no
# call circle between app/'s objects (nm on the library's objects).
add_test(NAME layering
  COMMAND ${TD_PY} ${CMAKE_CURRENT_SOURCE_DIR}/unit/layering.py ${PROJECT_SOURCE_DIR}
          ${CMAKE_BINARY_DIR}/CMakeFiles/tdcore.dir)
set_tests_properties(layering PROPERTIES TIMEOUT 60 LABELS "foundation;build")

# broken_build: a compile error fails td_build (incremental too), the
# quickstart and the test script, with the compiler's error shown.
add_test(NAME broken_build
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e/broken_build.sh ${CMAKE_CURRENT_BINARY_DIR}/broken_build)
set_tests_properties(broken_build PROPERTIES TIMEOUT 900 PROCESSORS 2 LABELS "e2e")
