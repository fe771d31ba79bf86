# Runs one `laggard` command and checks it against a golden file.
#   -DCMD=<binary> -DARGS=<arguments joined by '|'> -DWORKDIR=<cwd> -DEXPECT_RC=<n>
#   [-DGOLDEN=<file with the expected stdout>] [-DSTDERR_MATCH=<regex stderr must match>]
#   [-DSTDOUT_MATCH=<regex stdout must match>]
# With the environment variable LAGGARD_UPDATE_GOLDEN=1 the golden file is rewritten instead.
string(REPLACE "|" ";" ARGS "${ARGS}")
execute_process(COMMAND ${CMD} ${ARGS}
  WORKING_DIRECTORY ${WORKDIR}
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL EXPECT_RC)
  message(FATAL_ERROR "exit code ${rc}, expected ${EXPECT_RC}\nstdout:\n${out}\nstderr:\n${err}")
endif()
if(DEFINED STDERR_MATCH AND NOT err MATCHES "${STDERR_MATCH}")
  message(FATAL_ERROR "stderr does not match '${STDERR_MATCH}':\n${err}")
endif()
if(DEFINED STDOUT_MATCH AND NOT out MATCHES "${STDOUT_MATCH}")
  message(FATAL_ERROR "stdout does not match '${STDOUT_MATCH}':\n${out}")
endif()
if(DEFINED GOLDEN)
  if("$ENV{LAGGARD_UPDATE_GOLDEN}" STREQUAL "1")
    file(WRITE ${GOLDEN} "${out}")
    return()
  endif()
  file(READ ${GOLDEN} expected)
  if(NOT out STREQUAL expected)
    file(WRITE ${GOLDEN}.actual "${out}")
    message(FATAL_ERROR "stdout differs from ${GOLDEN} (actual output in ${GOLDEN}.actual)\n"
                        "--- actual ---\n${out}")
  endif()
endif()
