#!/usr/bin/env bash
# `cmake --install` of a build, then a program outside the tree built against the installed
# package twice: with find_package(ddprun) (ddprun::runtime) and with pkg-config (ddprun-runtime),
# each run under the installed ddprun with 2 workers (on Gloo: `auto` would pick NCCL on a GPU
# host). The program is built as C++17, which is all the package asks of it. Last, the same
# package laid out with a multi-level libdir (lib/x86_64-linux-gnu, as Debian's GNUInstallDirs
# gives for /usr), its .pc file written by the script the build uses, without configuring the
# project again.
#
#   install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
source=$2
work=$(mktemp -d /tmp/ddprun-install-XXXXXX)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
export DDPRUN_BACKEND=gloo

cmake --install "$build" --prefix "$prefix" > "$work/install.log"
test -f "$prefix/include/ddprun/runtime/process_group.h"
test -f "$prefix/lib/cmake/ddprun/ddprunConfig.cmake"
test -f "$prefix/lib/pkgconfig/ddprun-runtime.pc"
test -x "$prefix/bin/ddprun"
# The public header stands alone: no Boost, CUDA, NCCL or Gloo include.
if grep -E '#include <(boost|cuda|nccl|gloo)' -r "$prefix/include/ddprun/runtime"; then
  echo "install_test: the public header includes a third-party header" >&2
  exit 1
fi

# Consumers need C++17, not the C++20 the library is built with.
grep -q 'INTERFACE_COMPILE_FEATURES "cxx_std_17"' "$prefix"/lib/cmake/ddprun/ddprunTargets.cmake
if grep -e '-std=' "$prefix/lib/pkgconfig/ddprun-runtime.pc"; then
  echo "install_test: the pkg-config file imposes a language standard" >&2
  exit 1
fi

echo "--- find_package(ddprun)"
cmake -S "$source/tests/runtime/consumer" -B "$work/consumer" -G Ninja \
      -DCMAKE_PREFIX_PATH="$prefix" > "$work/configure.log"
cmake --build "$work/consumer" > "$work/build.log"
out=$("$prefix/bin/ddprun" --standalone --nproc-per-node 2 --no-python "$work/consumer/consumer")
echo "$out"
[[ $(grep -c "sum 3 ok" <<< "$out") == 2 ]]

# pkg-config-built consumer PREFIX LIBDIR: builds the consumer as C++17 against the package
# installed under PREFIX (library in PREFIX/LIBDIR) and runs it under ddprun with 2 workers.
pkg_config_consumer() {
  local root=$1 libdir=$2
  [[ $(PKG_CONFIG_PATH=$root/$libdir/pkgconfig pkg-config --variable=libdir ddprun-runtime |
       xargs realpath) == "$(realpath "$root/$libdir")" ]]
  # shellcheck disable=SC2046  # the flags are meant to split
  c++ -std=c++17 -Wall -Wextra -Wpedantic -Werror "$source/tests/runtime/consumer/consumer.cc" \
      -o "$work/consumer-pc" $(PKG_CONFIG_PATH=$root/$libdir/pkgconfig \
                               pkg-config --cflags --libs ddprun-runtime)
  out=$("$prefix/bin/ddprun" --standalone --nproc-per-node 2 --no-python "$work/consumer-pc")
  echo "$out"
  [[ $(grep -c "sum 3 ok" <<< "$out") == 2 ]]
}

echo "--- pkg-config ddprun-runtime"
pkg_config_consumer "$prefix" lib

echo "--- pkg-config ddprun-runtime, libdir lib/x86_64-linux-gnu"
multi=$work/multi
mkdir -p "$multi/lib/x86_64-linux-gnu/pkgconfig"
cp -a "$prefix/include" "$multi/"
cp -a "$prefix"/lib/libddprun-runtime.so* "$multi/lib/x86_64-linux-gnu/"
cmake -DCMAKE_INSTALL_LIBDIR=lib/x86_64-linux-gnu -DCMAKE_INSTALL_INCLUDEDIR=include \
      -DPROJECT_VERSION=0 -DOUTPUT="$multi/lib/x86_64-linux-gnu/pkgconfig/ddprun-runtime.pc" \
      -P "$source/cmake/DdprunRuntimePkgConfig.cmake"
pkg_config_consumer "$multi" lib/x86_64-linux-gnu
echo "install_test: ok"
