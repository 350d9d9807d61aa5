# Runs the suite on a deliberately broken plugin: passes when the suite FAILS
# and its output names the broken contract (EXPECT, a plain substring).
execute_process(
  COMMAND ${SUITE} --plugin ${PLUGIN} --reference ${REFERENCE} --filter ${FILTER}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 110)
set(all "${out}\n${err}")
# Show the failures the suite reported (not the whole log).
string(REGEX MATCHALL "[^\n]*(contract:|FAILED|crashed)[^\n]*" lines "${all}")
list(REMOVE_DUPLICATES lines)
list(SUBLIST lines 0 12 lines)
string(REPLACE ";" "\n  " shown "${lines}")
message("halo-conformance on the broken copy '${NAME}' (filter ${FILTER}) exited with ${rc}:\n  ${shown}")
if(rc EQUAL 0)
  message(FATAL_ERROR "the suite PASSED the deliberately broken plugin '${NAME}'")
endif()
string(FIND "${all}" "${EXPECT}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "the suite failed on '${NAME}' but its output does not name the broken contract: '${EXPECT}'")
endif()
message("OK: the suite rejects '${NAME}' and names '${EXPECT}'")
