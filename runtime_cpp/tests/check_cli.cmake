# Runs EXE with ARGS ("|"-separated), then checks the exit code (EXPECT_RC: "nonzero" (the
# default) or an exact number such as 0 or 2) and that stdout+stderr match the regex EXPECT
# (and, if EXPECT_NOT is set, do not match that one).
string(REPLACE "|" ";" argv "${ARGS}")
execute_process(COMMAND ${EXE} ${argv} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
message("exit code: ${rc}\n--- output ---\n${out}${err}")
if(NOT DEFINED EXPECT_RC)
  set(EXPECT_RC nonzero)
endif()
if(EXPECT_RC MATCHES "^[0-9]+$" AND NOT rc STREQUAL EXPECT_RC)
  message(FATAL_ERROR "expected exit code ${EXPECT_RC}, got ${rc}")
endif()
if(EXPECT_RC STREQUAL "nonzero" AND (rc STREQUAL "0" OR NOT rc MATCHES "^[0-9]+$"))
  message(FATAL_ERROR "expected a non-zero exit code (not a crash), got '${rc}'")
endif()
if(NOT "${out}${err}" MATCHES "${EXPECT}")
  message(FATAL_ERROR "output does not match '${EXPECT}'")
endif()
if(DEFINED EXPECT_NOT AND "${out}${err}" MATCHES "${EXPECT_NOT}")
  message(FATAL_ERROR "output matches '${EXPECT_NOT}', which it must not")
endif()
