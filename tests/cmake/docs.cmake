# docs.cmake — the user's guide against the code (tests/docs/run_docs.py).
#   docs: README.md under 250 lines, showing the two commands and linking
#     every docs/*.md chapter; every relative link and #anchor in README.md
#     and docs/*.md resolves; no issue numbers in them; and every code block
#     marked as tested (```bash tested, or <!-- tested --> before the fence)
#     runs against this build — small decks on 1 to 8 ranks, in one scratch
#     folder per file under tests/docs/ of the build (about a minute).
add_test(NAME docs
  COMMAND ${TD_PY} ${CMAKE_CURRENT_SOURCE_DIR}/docs/run_docs.py
          --root ${PROJECT_SOURCE_DIR} --trident $<TARGET_FILE:trident>
          --mpiexec ${MPIEXEC_EXECUTABLE} --work ${CMAKE_CURRENT_BINARY_DIR}/docs
          --timeout 300)
set_tests_properties(docs PROPERTIES TIMEOUT 900 PROCESSORS 2 LABELS "docs;e2e;mpi"
  ENVIRONMENT "${TD_GRID_ENV}")
