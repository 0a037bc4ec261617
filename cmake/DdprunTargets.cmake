# Target-scoped build settings shared by every ddprun target. Nothing here touches global flags,
# so ddprun can be embedded with add_subdirectory() without imposing its warnings on the parent.

# ddprun_configure_target(<target>): warnings (as errors unless DDPRUN_WERROR=OFF) and sanitizers.
function(ddprun_configure_target target)
  target_compile_features(${target} PUBLIC cxx_std_20)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
                                           -Wold-style-cast -Wcast-align)
  # GCC 12 reports false -Wrestrict overlaps inside std::string at -O3 (GCC bug 105329),
  # e.g. for `a + "/" + b`; later releases do not.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
    target_compile_options(${target} PRIVATE -Wno-restrict)
  endif()
  if(DDPRUN_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
  # Each function and variable in its own section, so that ddprun's --gc-sections
  # (launcher/CMakeLists.txt) drops the ones nothing calls, not just whole unused sections: the
  # agent's peak RSS (docs/benchmarks.md, "Launch at the floor"). Not under the sanitizers,
  # whose build does not collect sections.
  if(NOT DDPRUN_SANITIZE)
    target_compile_options(${target} PRIVATE -ffunction-sections -fdata-sections)
  endif()
  if(DDPRUN_SANITIZE)
    target_compile_options(${target} PRIVATE -fsanitize=address,undefined -fno-omit-frame-pointer
                                             -fno-sanitize-recover=undefined)
    target_link_options(${target} PUBLIC -fsanitize=address,undefined)
  endif()
endfunction()

# ddprun_add_library(<name> <alias> SOURCES ... ) : a static library with its module's public
# include directory and the shared settings above.
function(ddprun_add_library name alias)
  cmake_parse_arguments(ARG "" "" "SOURCES" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  add_library(${alias} ALIAS ${name})
  ddprun_configure_target(${name})
endfunction()

# ddprun_add_executable(<name> SOURCES ...)
function(ddprun_add_executable name)
  cmake_parse_arguments(ARG "" "" "SOURCES" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  ddprun_configure_target(${name})
endfunction()

# ddprun_precompile_headers(<target> [HEADERS...]): with DDPRUN_PRECOMPILE_HEADERS, the standard
# headers, fmt, nlohmann/json and spdlog (plus the given ones) are parsed once for the target
# instead of once per file, where parsing is about half of a typical launcher file's compile time
# (for Asio's files the back end dominates, and a precompiled Asio gains nothing). Only for
# targets that link ddprun::spdlog: without SPDLOG_COMPILED_LIB its header compiles spdlog itself
# into every file. Off by default, so that the builds the tests run still catch a file that
# forgets an include of its own; scripts/build.sh --main turns it on.
function(ddprun_precompile_headers target)
  if(NOT DDPRUN_PRECOMPILE_HEADERS)
    return()
  endif()
  target_precompile_headers(${target} PRIVATE
    <algorithm> <chrono> <cstdint> <functional> <map> <memory> <mutex> <optional> <ostream>
    <string> <string_view> <system_error> <utility> <vector> <fmt/format.h> <nlohmann/json.hpp>
    <spdlog/spdlog.h> ${ARGN})
endfunction()
