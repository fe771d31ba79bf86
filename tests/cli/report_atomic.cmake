# `laggard report` onto a disk that fills up (a file size limit: write() fails with EFBIG) leaves
# the previous report as it was, and onto an input log refuses without touching it.
#   -DCMD=<laggard> -DRUN=<run dir to copy> -DWORK=<scratch dir>
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
file(COPY ${RUN}/ DESTINATION ${WORK}/run)
file(WRITE ${WORK}/out.html "previous report\n")
execute_process(COMMAND sh -c "trap '' XFSZ; ulimit -f 4; exec \"$0\" report -q \"$1\" -o \"$2\""
                        ${CMD} ${WORK}/run ${WORK}/out.html
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
file(READ ${WORK}/out.html kept)
if(NOT rc EQUAL 2 OR NOT err MATCHES "cannot write .*out.html: File too large" OR
   NOT kept STREQUAL "previous report\n")
  message(FATAL_ERROR "full disk: rc ${rc}\nstderr: ${err}\nout.html now: ${kept}")
endif()
file(GLOB left ${WORK}/.out.html.tmp-*)
if(left)
  message(FATAL_ERROR "temporary file left behind: ${left}")
endif()
file(READ ${WORK}/run/rank-0.jsonl before)
execute_process(COMMAND ${CMD} report -q ${WORK}/run -o ${WORK}/run/rank-0.jsonl
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
file(READ ${WORK}/run/rank-0.jsonl after)
if(NOT rc EQUAL 2 OR NOT err MATCHES "refusing to write .*rank-0.jsonl: it is an input" OR
   NOT before STREQUAL after)
  message(FATAL_ERROR "report onto its input: rc ${rc}\nstderr: ${err}")
endif()
# A report to a file that does not exist yet (the usual case) is written.
execute_process(COMMAND ${CMD} report -q ${WORK}/run -o ${WORK}/new.html
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR NOT EXISTS ${WORK}/new.html)
  message(FATAL_ERROR "report to a new file: rc ${rc}\nstderr: ${err}")
endif()
