# ddprun_runtime_pkg_config(<output>): writes the pkg-config file of ddprun::runtime
# (ddprun-runtime.pc.in) for an install whose library and header directories are
# CMAKE_INSTALL_LIBDIR and CMAKE_INSTALL_INCLUDEDIR.
#
# Relative directories (the usual case) are written relative to the .pc file, which lies in
# <prefix>/<libdir>/pkgconfig: `prefix` climbs one level per component of libdir, plus one for
# pkgconfig (lib -> ../.., lib/x86_64-linux-gnu -> ../../..), so the package can be installed
# under any --prefix. If either directory is absolute, every path is written as configured.
#
# Also runs as a script, so that a test can check another layout without configuring again:
#   cmake -DCMAKE_INSTALL_LIBDIR=lib/x86_64-linux-gnu -DCMAKE_INSTALL_INCLUDEDIR=include \
#         -DPROJECT_VERSION=0.1.0 -DOUTPUT=ddprun-runtime.pc -P cmake/DdprunRuntimePkgConfig.cmake

set(_ddprun_pc_template "${CMAKE_CURRENT_LIST_DIR}/ddprun-runtime.pc.in")

function(ddprun_runtime_pkg_config output)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
    set(DDPRUN_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  else()
    file(RELATIVE_PATH up "/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/")
    string(REGEX REPLACE "/$" "" up "${up}")
    set(DDPRUN_PC_PREFIX "\${pcfiledir}/${up}")
  endif()
  foreach(dir LIBDIR INCLUDEDIR)
    if(IS_ABSOLUTE "${CMAKE_INSTALL_${dir}}")
      set(DDPRUN_PC_${dir} "${CMAKE_INSTALL_${dir}}")
    else()
      set(DDPRUN_PC_${dir} "\${prefix}/${CMAKE_INSTALL_${dir}}")
    endif()
  endforeach()
  configure_file("${_ddprun_pc_template}" "${output}" @ONLY)
endfunction()

if(CMAKE_SCRIPT_MODE_FILE STREQUAL CMAKE_CURRENT_LIST_FILE)
  ddprun_runtime_pkg_config("${OUTPUT}")
endif()
