# Runs one `laggard` command and checks that its text output is sane for a terminal whatever the
# input holds: no control characters but newlines (ESC, BEL, the C1 CSI, ...) nor bidi overrides, no "inf"/"nan",
# no number of 20 or more digits in a row.
#   -DCMD=<binary> -DARGS=<arguments joined by '|'> -DWORKDIR=<cwd> -DEXPECT_RC=<n>
#   [-DSTDOUT_MATCH=<regex>] [-DSTDERR_MATCH=<regex>]
string(REPLACE "|" ";" ARGS "${ARGS}")
execute_process(COMMAND ${CMD} ${ARGS}
  WORKING_DIRECTORY ${WORKDIR}
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL EXPECT_RC)
  message(FATAL_ERROR "exit code ${rc}, expected ${EXPECT_RC}\nstdout:\n${out}\nstderr:\n${err}")
endif()
string(ASCII 27 esc)
string(ASCII 7 bel)
string(ASCII 194 155 csi)  # U+009B in UTF-8: the C1 control CSI, ESC [ in one character
string(ASCII 226 128 174 rlo)  # U+202E in UTF-8: right-to-left override (the line reads backwards)
string(ASCII 226 129 167 rli)  # U+2067: right-to-left isolate
foreach(stream out err)
  set(text "${${stream}}")
  foreach(bad "${esc}" "${bel}" "${csi}" "${rlo}" "${rli}")
    string(FIND "${text}" "${bad}" at)
    if(NOT at EQUAL -1)
      message(FATAL_ERROR "std${stream} holds a raw control character at ${at}:\n${text}")
    endif()
  endforeach()
  if(text MATCHES "[0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9]")
    message(FATAL_ERROR "std${stream} holds an absurdly long number (${CMAKE_MATCH_0}):\n${text}")
  endif()
  if(text MATCHES "[^a-z](inf|nan)[^a-z]")
    message(FATAL_ERROR "std${stream} prints '${CMAKE_MATCH_1}':\n${text}")
  endif()
endforeach()
if(DEFINED STDOUT_MATCH AND NOT out MATCHES "${STDOUT_MATCH}")
  message(FATAL_ERROR "stdout does not match '${STDOUT_MATCH}':\n${out}")
endif()
if(DEFINED STDERR_MATCH AND NOT err MATCHES "${STDERR_MATCH}")
  message(FATAL_ERROR "stderr does not match '${STDERR_MATCH}':\n${err}")
endif()
