# Script mode (cmake -P), run after ctitan_tests links: lists its GoogleTest suites and writes one
# ctest entry per suite to OUTPUT. One process per suite instead of one per test: a process of the
# test program starts in 0.3 s (libtorch's static initialisers), and the tests of a suite share
# what they compute once per process (a one-process reference run, a trained export). Measured on
# the build machine: the 313 unit tests took 160 CPU-seconds one process each, 80 in one process.
#
# Inputs: TEST_EXECUTABLE, OUTPUT, WORKING_DIRECTORY (where each entry runs). Suites named Cli*
# (or Prefix/Cli* when parametrized) run the ctitan binary (label integration), Gpu* need a CUDA
# device (label gpu), the rest are in-process units (label unit). COST orders a fresh run (no
# timings yet) so the long entries start first: integration tests weigh ten units. A test that
# skips makes its whole entry skipped (support/test_main.cpp), so a suite's tests share one
# reason to skip. The file is rewritten when ctitan_tests relinks; after editing this script,
# relink it (or delete the program) to refresh the entries.
execute_process(COMMAND "${TEST_EXECUTABLE}" --gtest_list_tests
  OUTPUT_VARIABLE listing ERROR_VARIABLE errors RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${TEST_EXECUTABLE} --gtest_list_tests failed (${rc}): ${errors}")
endif()

string(REPLACE ";" "\\;" listing "${listing}")
string(REPLACE "\n" ";" lines "${listing}")
set(suites "")
foreach(line IN LISTS lines)
  if(line MATCHES "^([^ #][^ ]*)\\.")  # "Suite." or "Prefix/Suite."  ("  Test" lines are indented)
    set(suite "${CMAKE_MATCH_1}")
    list(APPEND suites "${suite}")
    set(count_${suite} 0)
  elseif(line MATCHES "^  [^ ]" AND suite)
    math(EXPR count_${suite} "${count_${suite}} + 1")
  endif()
endforeach()

set(script "# Written by cmake/DiscoverTestSuites.cmake from ${TEST_EXECUTABLE} --gtest_list_tests\n")
foreach(suite IN LISTS suites)
  set(label unit)
  set(weight 1)
  if(suite MATCHES "(^|/)Cli")
    set(label integration)
    set(weight 10)
  elseif(suite MATCHES "(^|/)Gpu")
    set(label gpu)
  endif()
  math(EXPR cost "${count_${suite}} * ${weight}")
  set(env "CTITAN_TEST_SKIP_EXIT_CODE=77")
  if(NOT label STREQUAL "gpu")
    # Pinned to the CPU: two ranks cannot share one GPU under NCCL, and CPU results are what the
    # tests compare against.
    string(APPEND env ";CTITAN_NUM_THREADS=1;CTITAN_CUDA=0")
  endif()
  string(APPEND script
    "add_test([==[${suite}]==] \"${TEST_EXECUTABLE}\" [==[--gtest_filter=${suite}.*]==])\n"
    "set_tests_properties([==[${suite}]==] PROPERTIES LABELS ${label} COST ${cost} SKIP_RETURN_CODE 77 "
    "WORKING_DIRECTORY [==[${WORKING_DIRECTORY}]==] "
    "ENVIRONMENT \"${env}\")\n")
endforeach()
file(WRITE "${OUTPUT}" "${script}")
