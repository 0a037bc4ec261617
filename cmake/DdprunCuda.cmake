# Detects the CUDA runtime and NCCL (by default under /usr/local/cuda). Neither is required:
# without them DDPRUN_HAVE_NCCL is OFF and everything that needs a GPU is left out of the build.
#
# Result:
#   DDPRUN_HAVE_NCCL   ON when both were found and DDPRUN_WITH_NCCL is ON
#   ddprun::nccl       imported target (headers + libnccl) when DDPRUN_HAVE_NCCL
#   CUDA::cudart       from FindCUDAToolkit when DDPRUN_HAVE_NCCL

set(DDPRUN_HAVE_NCCL OFF)
if(NOT DDPRUN_WITH_NCCL)
  return()
endif()

if(NOT DEFINED CUDAToolkit_ROOT AND EXISTS /usr/local/cuda)
  set(CUDAToolkit_ROOT /usr/local/cuda)
endif()
find_package(CUDAToolkit QUIET)
if(NOT CUDAToolkit_FOUND)
  message(STATUS "CUDA toolkit not found: building without the NCCL backend")
  return()
endif()

find_path(NCCL_INCLUDE_DIR nccl.h
          HINTS ${NCCL_ROOT} ENV NCCL_ROOT ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_ROOT}
          PATH_SUFFIXES include)
find_library(NCCL_LIBRARY nccl
             HINTS ${NCCL_ROOT} ENV NCCL_ROOT ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_ROOT}
             PATH_SUFFIXES lib lib64)
if(NOT NCCL_INCLUDE_DIR OR NOT NCCL_LIBRARY)
  message(STATUS "NCCL not found (CUDA ${CUDAToolkit_VERSION}): building without the NCCL backend")
  return()
endif()

file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" _nccl_version_lines REGEX "#define NCCL_(MAJOR|MINOR|PATCH) ")
string(REGEX REPLACE ".*NCCL_MAJOR ([0-9]+).*NCCL_MINOR ([0-9]+).*NCCL_PATCH ([0-9]+).*" "\\1.\\2.\\3"
       NCCL_VERSION "${_nccl_version_lines}")

add_library(ddprun::nccl UNKNOWN IMPORTED)
set_target_properties(ddprun::nccl PROPERTIES IMPORTED_LOCATION "${NCCL_LIBRARY}"
                                              INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
set(DDPRUN_HAVE_NCCL ON)
message(STATUS "Found CUDA ${CUDAToolkit_VERSION} and NCCL ${NCCL_VERSION} (${NCCL_LIBRARY})")
