# One CTest entry per test file (doctest --source-file filter), so `ctest -j` runs them in parallel
# and `ctest -L model` / `-L cuda` / `-L slow` select by label. A file declares its labels on a line
#   // ctest-labels: model slow
# Sanitized Debug builds run the engine many times slower (unit-run's interrupted-and-resumed plan
# takes about 10 minutes under ASan/UBSan), so they get a longer limit per test file.
set(repro_test_timeout 600)
if(REPRO_SANITIZE)
  set(repro_test_timeout 2400)
endif()
foreach(src ${REPRO_TEST_SOURCES})
  get_filename_component(name ${src} NAME_WE)
  add_test(NAME ${name} COMMAND repro-tests --source-file=*${name}.cpp --no-intro
           WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
  file(STRINGS ${src} label_line REGEX "^// ctest-labels:" LIMIT_COUNT 1)
  set(labels unit)
  if(label_line)
    string(REGEX REPLACE "^// ctest-labels:[ ]*" "" label_text "${label_line}")
    string(REPLACE " " ";" labels "${label_text}")
  endif()
  set_tests_properties(${name} PROPERTIES LABELS "${labels}" TIMEOUT ${repro_test_timeout}
                       ENVIRONMENT "REPRO_TEST_TMP=${CMAKE_BINARY_DIR}/test-tmp")
endforeach()

# libFuzzer corpora replayed as regression tests (no clang needed: the test binary feeds each file
# to the same entry point the fuzzer uses).
