# Runs a program and writes its stdout to a file, failing the build when it fails: a build step
# that captures a built binary's output (the bash completion), with no shell in between.
#
#   cmake -DOUTPUT=FILE -DPROGRAM=EXE "-DARGS=a;b" -P packaging/run-to-file.cmake
execute_process(COMMAND "${PROGRAM}" ${ARGS} OUTPUT_FILE "${OUTPUT}.tmp" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  file(REMOVE "${OUTPUT}.tmp")
  message(FATAL_ERROR "${PROGRAM} ${ARGS} failed (${rc})")
endif()
file(RENAME "${OUTPUT}.tmp" "${OUTPUT}")
