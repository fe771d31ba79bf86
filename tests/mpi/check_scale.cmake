# Runs tests/mpi/gather_scale under mpiexec with NP ranks and checks what it printed.
#   -DNP=64 -DMPIEXEC=... -DNP_FLAG=-n -DMPI_FLAGS=a|b -DPROGRAM=... -DSTEPS=30
string(REPLACE "|" ";" MPI_FLAGS "${MPI_FLAGS}")
execute_process(COMMAND ${MPIEXEC} ${NP_FLAG} ${NP} ${MPI_FLAGS} ${PROGRAM} --steps ${STEPS}
                        --stages 16 --ranks-per-host 4 --fan-out 2
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc TIMEOUT 170)
set(all "stdout:\n${out}\nstderr:\n${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "exit code ${rc}, expected 0\n${all}")
endif()
math(EXPR received "${STEPS} * (${NP} - 1)")
set(want "analysis: ranks ${NP} windows ${STEPS} incomplete 0 received ${received} late 0 reports ${STEPS} in_order 1")
string(FIND "${out}" "${want}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "expected '${want}'\n${all}")
endif()
math(EXPR slow "${NP} - 1")
if(NOT out MATCHES "confirmed ${slow}:stage_2 \n")
  message(FATAL_ERROR "rank ${slow}'s stage_2 not the one confirmed straggler\n${all}")
endif()
foreach(r RANGE 0 ${slow})  # the analysis rank's own samples count as delivered too
  if(NOT out MATCHES "rank ${r}: sent ${STEPS} dropped 0 forwarded [0-9]+ errors 0\n")
    message(FATAL_ERROR "rank ${r} did not deliver all its samples\n${all}")
  endif()
endforeach()
if(err MATCHES "warning")
  message(FATAL_ERROR "warnings in a healthy run\n${all}")
endif()
message(STATUS "${out}")
