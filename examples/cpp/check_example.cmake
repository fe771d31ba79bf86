# Runs the MPI example under mpiexec with 4 ranks and checks what it printed.
#   -DMODE=detect|failure|thread_level|finalize_first -DMPIEXEC=... -DNP_FLAG=-n -DMPI_FLAGS=a|b
#   -DPROGRAM=laggard_mpi_example -DLOG_DIR=<fresh directory for the run's logs>
string(REPLACE "|" ";" MPI_FLAGS "${MPI_FLAGS}")
file(REMOVE_RECURSE ${LOG_DIR})
set(common --steps 100 --interval 5 --slow-rank 2 --slow-stage forward --slow-factor 1.5
           --log-dir ${LOG_DIR})
if(MODE STREQUAL "detect")
  set(args ${common})
elseif(MODE STREQUAL "failure")
  # Rank 0's side channel dies at step 20; the others must notice within 0.5 s of silence.
  set(args ${common} --fail-side-channel-at 20 --side-channel-timeout 0.5 --close-timeout 3)
elseif(MODE STREQUAL "thread_level")
  set(args --steps 30 --interval 5 --thread-level serialized --log-dir ${LOG_DIR})
elseif(MODE STREQUAL "finalize_first")
  # The program "forgets" close() before MPI_Finalize: the finalize hook stops the side channel.
  set(args --steps 40 --interval 5 --finalize-first 1 --close-timeout 2 --log-dir ${LOG_DIR})
else()
  message(FATAL_ERROR "unknown MODE ${MODE}")
endif()

execute_process(COMMAND ${MPIEXEC} ${NP_FLAG} 4 ${MPI_FLAGS} ${PROGRAM} ${args}
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc TIMEOUT 100)
set(all "stdout:\n${out}\nstderr:\n${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "exit code ${rc}, expected 0\n${all}")
endif()
foreach(r 0 1 2 3)
  if(NOT out MATCHES "rank ${r}: completed [0-9]+ steps")
    message(FATAL_ERROR "rank ${r} did not complete its steps\n${all}")
  endif()
  if(NOT EXISTS ${LOG_DIR}/rank-${r}.jsonl)
    message(FATAL_ERROR "no ${LOG_DIR}/rank-${r}.jsonl\n${all}")
  endif()
endforeach()

function(expect text regex what)
  if(NOT text MATCHES "${regex}")
    message(FATAL_ERROR "${what} (no match for '${regex}')\n${all}")
  endif()
endfunction()
function(expect_not text regex what)
  if(text MATCHES "${regex}")
    message(FATAL_ERROR "${what} (matched '${regex}')\n${all}")
  endif()
endfunction()

if(MODE STREQUAL "detect")
  expect("${out}" "confirmed straggler: rank 2 in forward" "no live verdict on rank 2 forward")
  expect("${out}" "straggler: rank 2 \\([^)]*\\) in forward: slow in" "no summary verdict")
  # The ranks that wait for rank 2 in the all-reduce are evidence, never a verdict.
  expect_not("${out}" "straggler: rank [013] \\([^)]*\\) in communication" "a waiting rank blamed")
  file(STRINGS ${LOG_DIR}/reports.jsonl reports)
  list(LENGTH reports n)
  if(n LESS 10)
    message(FATAL_ERROR "only ${n} reports in reports.jsonl\n${all}")
  endif()
  # The analysis rank's console line of the verdict is at warning level; nothing else may be.
  expect("${err}" "laggard: warning: straggler confirmed: rank 2 \\([^)]*\\) in 'forward'"
         "no console line of the verdict")
  string(REGEX REPLACE "laggard: warning: straggler (confirmed|cleared)[^\n]*" "" other "${err}")
  expect_not("${other}" "warning" "warnings in a run whose only fault is the slow rank")
elseif(MODE STREQUAL "failure")
  expect("${out}" "rank 0: side channel killed at step 20" "the drill did not run")
  expect("${err}" "rank [123]: side channel: rank 0 \\(this rank.s parent in the gather tree\\) acknowledged nothing"
         "no warning on the other ranks")
elseif(MODE STREQUAL "thread_level")
  expect("${err}" "rank [0-3]: side channel: transport 'mpi' unavailable: MPI provides MPI_THREAD_SERIALIZED.*needs MPI_THREAD_MULTIPLE"
         "no warning about the thread level")
elseif(MODE STREQUAL "finalize_first")
  expect("${err}" "rank [0-3]: side channel: MPI_Finalize ran before the Analyzer was closed"
         "no warning about the side channel stopped by MPI_Finalize")
endif()
message(STATUS "${all}")
