# CPack's pre-build script: refuses a package that lacks a file it must ship (the man pages need
# help2man at configure time). CPACK_TEMPORARY_INSTALL_DIRECTORY is the staged install.
cmake_policy(SET CMP0057 NEW)  # if(... IN_LIST ...)
file(GLOB_RECURSE _staged RELATIVE "${CPACK_TEMPORARY_INSTALL_DIRECTORY}"
     "${CPACK_TEMPORARY_INSTALL_DIRECTORY}/*")
foreach(_required usr/bin/ddprun usr/bin/ddprun-rendezvous usr/share/man/man1/ddprun.1.gz
                  usr/share/man/man1/ddprun-rendezvous.1.gz usr/share/bash-completion/completions/ddprun)
  if(NOT "${_required}" IN_LIST _staged)
    message(FATAL_ERROR "the package would lack /${_required}: install help2man "
                        "(scripts/install-deps.sh), configure the build again, and rebuild")
  endif()
endforeach()
