# Runs EXE with ARGS ("|"-separated), then checks the exit code (EXPECT_RC: "0" or
# "nonzero", default nonzero) and that stdout+stderr match the regex EXPECT.
string(REPLACE "|" ";" argv "${ARGS}")
execute_process(COMMAND ${EXE} ${argv} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
message("exit code: ${rc}\n--- output ---\n${out}${err}")
if(NOT DEFINED EXPECT_RC)
  set(EXPECT_RC nonzero)
endif()
if(EXPECT_RC STREQUAL "0" AND NOT rc STREQUAL "0")
  message(FATAL_ERROR "expected exit code 0, got ${rc}")
endif()
if(EXPECT_RC STREQUAL "nonzero" AND (rc STREQUAL "0" OR NOT rc MATCHES "^[0-9]+$"))
  message(FATAL_ERROR "expected a non-zero exit code (not a crash), got '${rc}'")
endif()
if(NOT "${out}${err}" MATCHES "${EXPECT}")
  message(FATAL_ERROR "output does not match '${EXPECT}'")
endif()
