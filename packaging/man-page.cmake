# One man page from a built program's --help and --version (help2man), gzipped as Debian ships
# man pages: the --help text is the page's only source.
#
#   cmake -DHELP2MAN=help2man -DPROGRAM=EXE -DNAME="one line" -DOUTPUT=ddprun.1.gz \
#         -P packaging/man-page.cmake
get_filename_component(page "${OUTPUT}" NAME_WLE)
get_filename_component(dir "${OUTPUT}" DIRECTORY)
execute_process(COMMAND "${HELP2MAN}" --no-info --no-discard-stderr --section 1 "--name=${NAME}"
                        "--output=${dir}/${page}" "${PROGRAM}"
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "help2man ${PROGRAM} failed (${rc}): does its --help and --version exit 0?")
endif()
# -n: no name or time stamp in the archive, so the same page gzips to the same bytes.
execute_process(COMMAND gzip -9 -n -f "${dir}/${page}" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "gzip ${dir}/${page} failed (${rc})")
endif()
