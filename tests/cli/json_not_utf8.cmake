# --json output when a name or a path is not UTF-8 (Linux allows any bytes but '/' and NUL): the
# program writes the bad bytes as U+FFFD and exits 0; it used to abort on nlohmann's exception.
#   -DCMD=<binary> -DWORKDIR=<source dir> -DSCRATCH=<a directory to create the run in>
string(ASCII 152 144 bad)  # 0x98 0x90: not UTF-8
set(run "${SCRATCH}/run-${bad}")
file(REMOVE_RECURSE "${run}")
file(MAKE_DIRECTORY "${run}")
file(GLOB ranks "${WORKDIR}/examples/run-healthy/rank-*.jsonl")
file(COPY ${ranks} DESTINATION "${run}")

function(check_json what)
  execute_process(COMMAND ${CMD} ${ARGN} OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what}: exit code ${rc}, expected 0\nstdout:\n${out}\nstderr:\n${err}")
  endif()
  string(JSON type ERROR_VARIABLE json_error TYPE "${out}")
  if(json_error OR NOT type STREQUAL "OBJECT")
    message(FATAL_ERROR "${what}: not a JSON object (${json_error}):\n${out}")
  endif()
  string(FIND "${out}" "${bad}" at)
  if(NOT at EQUAL -1)
    message(FATAL_ERROR "${what}: the bytes that are not UTF-8 reached the output:\n${out}")
  endif()
endfunction()

check_json("compare --stages" compare --baseline-vector 1,2 --current-vector 1,3
           --stages "a,${bad}b" --json)
check_json("analyze --json" analyze --json "${run}")
check_json("compare --json" compare --json -q "${run}" "${run}")
file(REMOVE_RECURSE "${run}")
