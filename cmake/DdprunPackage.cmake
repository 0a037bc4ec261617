# The Debian package: `cmake --build build --target package` (or `cpack` in the build directory)
# writes ddprun_<version>_<arch>.deb. It holds what the install rules install, under /usr:
#   bin/ddprun, bin/ddprun-rendezvous
#   <libdir>/ddprun/libddprun-relay-handoff.so   the relay's handoff shim, where ddprun looks for it
#                                                relative to its own directory (agent/relay_handoff.cc)
#   <libdir>/libddprun-runtime.so*, include/ddprun, <libdir>/cmake/ddprun, <libdir>/pkgconfig
# and two things made here from the built binaries, so that each has one source:
#   share/man/man1/ddprun.1.gz, ddprun-rendezvous.1.gz   help2man, from --help and --version
#   share/bash-completion/completions/ddprun             `ddprun completion bash`, from the option table
# Tests and benchmarks have no install rules, so they are not in it.
#
# Depends comes from dpkg-shlibdeps over the binaries (what they link); ddprun's own OpenSSL is
# loaded with dlopen (launcher/CMakeLists.txt), so it is not among ddprun's (see below).

set(_ddprun_generated "${PROJECT_BINARY_DIR}/packaging")
file(MAKE_DIRECTORY "${_ddprun_generated}")

add_custom_command(
  OUTPUT "${_ddprun_generated}/ddprun.bash-completion"
  COMMAND "${CMAKE_COMMAND}" "-DOUTPUT=${_ddprun_generated}/ddprun.bash-completion"
          "-DPROGRAM=$<TARGET_FILE:ddprun>" "-DARGS=completion;bash"
          -P "${PROJECT_SOURCE_DIR}/packaging/run-to-file.cmake"
  DEPENDS ddprun "${PROJECT_SOURCE_DIR}/packaging/run-to-file.cmake"
  COMMENT "bash completion from ddprun's option table"
  VERBATIM)
set(_ddprun_generated_files "${_ddprun_generated}/ddprun.bash-completion")
install(FILES "${_ddprun_generated}/ddprun.bash-completion"
        DESTINATION "${CMAKE_INSTALL_DATADIR}/bash-completion/completions" RENAME ddprun)

find_program(DDPRUN_HELP2MAN help2man)
set(_ddprun_man_pages
  "ddprun\;launch distributed PyTorch training jobs (a native torchrun)"
  "ddprun-rendezvous\;the rendezvous store of ddprun jobs, as a standalone daemon")
if(DDPRUN_HELP2MAN)
  foreach(_page IN LISTS _ddprun_man_pages)
    list(GET _page 0 _program)
    list(GET _page 1 _name)
    set(_out "${_ddprun_generated}/${_program}.1.gz")
    add_custom_command(
      OUTPUT "${_out}"
      COMMAND "${CMAKE_COMMAND}" "-DHELP2MAN=${DDPRUN_HELP2MAN}" "-DPROGRAM=$<TARGET_FILE:${_program}>"
              "-DNAME=${_name}" "-DOUTPUT=${_out}" -P "${PROJECT_SOURCE_DIR}/packaging/man-page.cmake"
      DEPENDS ${_program} "${PROJECT_SOURCE_DIR}/packaging/man-page.cmake"
      COMMENT "man page ${_program}(1) from its --help"
      VERBATIM)
    list(APPEND _ddprun_generated_files "${_out}")
    install(FILES "${_out}" DESTINATION "${CMAKE_INSTALL_MANDIR}/man1")
  endforeach()
else()
  message(STATUS "help2man not found: no man pages, and the package target refuses to run "
                 "(scripts/install-deps.sh installs it)")
endif()
add_custom_target(ddprun_package_files ALL DEPENDS ${_ddprun_generated_files})

# --- CPack: the DEB generator
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME ddprun)
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
set(DDPRUN_PACKAGE_MAINTAINER "ddprun maintainers <root@localhost>"
    CACHE STRING "The Maintainer field of the Debian package")
set(CPACK_PACKAGE_CONTACT "${DDPRUN_PACKAGE_MAINTAINER}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "native launcher for distributed PyTorch training (torchrun's command line)")
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION
    "ddprun runs torchrun's command lines without Python in the launcher: one agent per node\n"
    "starts the workers, forms the rendezvous (c10d, etcd, static) and restarts or stops the job\n"
    "on failures. Also: ddprun-rendezvous, a standalone store daemon; libddprun-runtime, a C++\n"
    "library of collectives (Gloo, NCCL) bootstrapped from ddprun's store.")
string(REPLACE ";" "" CPACK_DEBIAN_PACKAGE_DESCRIPTION "${CPACK_DEBIAN_PACKAGE_DESCRIPTION}")
set(CPACK_DEBIAN_PACKAGE_SECTION utils)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # ddprun_<version>_<arch>.deb
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# libddprun-runtime.so.N: a shlibs file (what a package that links it depends on). CPack adds
# postinst and postrm scripts that run ldconfig (for every package with a library under /usr/lib),
# so after dpkg -r the package stays in dpkg's "config-files" state, with no file, until purged.
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_STRIP_FILES ON)  # debug info stays in the build tree
# libssl3 comes into Depends through ddprun-rendezvous, which links it (its token and TLS). ddprun
# alone would need it only as a Recommends: it loads libssl.so.3 for a token or TLS, so a job
# without them runs where it is absent (tests/packaging/deb_test.py checks it is in one of the two).
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "numactl, elfutils, gdb, openssh-client")
set(CPACK_PRE_BUILD_SCRIPTS "${PROJECT_SOURCE_DIR}/packaging/check-package.cmake")
include(CPack)
