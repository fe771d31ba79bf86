# `laggard report -o` and links (docs/reference/security.md): a symbolic link at the output path owned by
# another user is refused, never written through (root writing /tmp/dir/report.html where another
# user had planted a link to a root-owned 0600 file replaced that file with the report, mode
# 0644); a file replaced keeps its mode; the user's own link is followed to its file.
#   -DCMD=<laggard> -DRUN=<run dir> -DWORK=<scratch dir>
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})

# An existing 0600 report stays 0600 when it is replaced.
file(WRITE ${WORK}/private.html "old report\n")
execute_process(COMMAND chmod 0600 ${WORK}/private.html)
execute_process(COMMAND ${CMD} report -q ${RUN} -o ${WORK}/private.html
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
execute_process(COMMAND stat -c %a ${WORK}/private.html OUTPUT_VARIABLE mode OUTPUT_STRIP_TRAILING_WHITESPACE)
file(READ ${WORK}/private.html now)
if(NOT rc EQUAL 0 OR NOT mode STREQUAL "600" OR NOT now MATCHES "<!DOCTYPE html>")
  message(FATAL_ERROR "replacing a 0600 report: rc ${rc}, mode ${mode}\nstderr: ${err}")
endif()

# The user's own link: its file is replaced, the link stays.
file(WRITE ${WORK}/latest-target.html "old\n")
file(CREATE_LINK latest-target.html ${WORK}/latest.html SYMBOLIC)
execute_process(COMMAND ${CMD} report -q ${RUN} -o ${WORK}/latest.html
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
file(READ ${WORK}/latest-target.html now)
if(NOT rc EQUAL 0 OR NOT IS_SYMLINK ${WORK}/latest.html OR NOT now MATCHES "<!DOCTYPE html>")
  message(FATAL_ERROR "through the user's own link: rc ${rc}\nstderr: ${err}")
endif()

# /dev/stdout into a pipe: root's link to /proc/self/fd/1, which names "pipe:[N]" (no path): the
# page is written in place through it.
execute_process(COMMAND ${CMD} report -q ${RUN} -o /dev/stdout
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR NOT out MATCHES "^<!DOCTYPE html>")
  message(FATAL_ERROR "-o /dev/stdout into a pipe: rc ${rc}\nstderr: ${err}")
endif()

# Another user's link: only root can make one here (chown -h).
execute_process(COMMAND id -u OUTPUT_VARIABLE uid OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT uid STREQUAL "0")
  message("SKIPPED: planting another user's link needs root (uid ${uid})")
  return()
endif()
file(WRITE ${WORK}/secret "root's secret\n")
execute_process(COMMAND chmod 0600 ${WORK}/secret)
file(MAKE_DIRECTORY ${WORK}/shared)
file(CREATE_LINK ${WORK}/secret ${WORK}/shared/report.html SYMBOLIC)
execute_process(COMMAND chown -h 65534 ${WORK}/shared/report.html RESULT_VARIABLE chown_rc)
if(NOT chown_rc EQUAL 0)
  message(FATAL_ERROR "chown -h failed")
endif()
execute_process(COMMAND ${CMD} report -q ${RUN} -o ${WORK}/shared/report.html
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
file(READ ${WORK}/secret secret)
execute_process(COMMAND stat -c %a ${WORK}/secret OUTPUT_VARIABLE mode OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT rc EQUAL 2 OR NOT secret STREQUAL "root's secret\n" OR NOT mode STREQUAL "600" OR
   NOT err MATCHES "cannot write .*shared/report.html: it is a symbolic link owned by another user \\(uid 65534\\) to .*secret: not followed")
  message(FATAL_ERROR "another user's link: rc ${rc}, secret now '${secret}' mode ${mode}\nstderr: ${err}")
endif()
if(NOT IS_SYMLINK ${WORK}/shared/report.html)
  message(FATAL_ERROR "the planted link was removed or replaced")
endif()
file(GLOB left ${WORK}/shared/.report.html.tmp-* ${WORK}/.secret.tmp-*)
if(left)
  message(FATAL_ERROR "temporary file left behind: ${left}")
endif()
