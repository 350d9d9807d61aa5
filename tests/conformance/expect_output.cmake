# Runs the suite on a plugin that should pass: passes when the suite passes
# and its output contains EXPECT (a plain substring).
#   -DSUITE=<halo-conformance> -DPLUGIN=<path or name> -DARGS=<a,b,c> -DEXPECT=<text>
string(REPLACE "," ";" args "${ARGS}")
execute_process(COMMAND ${SUITE} --plugin ${PLUGIN} ${args}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 110)
set(all "${out}\n${err}")
string(REGEX MATCHALL "[^\n]*(tolerance|PASSED|FAILED)[^\n]*" lines "${all}")
string(REPLACE ";" "\n  " shown "${lines}")
message("halo-conformance --plugin ${PLUGIN} ${args} exited with ${rc}:\n  ${shown}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the suite failed:\n${all}")
endif()
string(FIND "${all}" "${EXPECT}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "the output does not contain '${EXPECT}'")
endif()
message("OK: '${EXPECT}'")
