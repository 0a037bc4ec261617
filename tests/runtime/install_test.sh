#!/usr/bin/env bash
# `cmake --install` of a build, then a program outside the tree built against the installed
# package twice: with find_package(ddprun) (ddprun::runtime) and with pkg-config (ddprun-runtime),
# each run under the installed ddprun with 2 workers.
#
#   install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
source=$2
work=$(mktemp -d /tmp/ddprun-install-XXXXXX)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

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

echo "--- find_package(ddprun)"
cmake -S "$source/tests/runtime/consumer" -B "$work/consumer" -G Ninja \
      -DCMAKE_PREFIX_PATH="$prefix" > "$work/configure.log"
cmake --build "$work/consumer" > "$work/build.log"
out=$("$prefix/bin/ddprun" --standalone --nproc-per-node 2 "$work/consumer/consumer")
echo "$out"
[[ $(grep -c "sum 3 ok" <<< "$out") == 2 ]]

echo "--- pkg-config ddprun-runtime"
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
# shellcheck disable=SC2046  # the flags are meant to split
c++ "$source/tests/runtime/consumer/consumer.cc" -o "$work/consumer-pc" \
    $(pkg-config --cflags --libs ddprun-runtime)
out=$("$prefix/bin/ddprun" --standalone --nproc-per-node 2 "$work/consumer-pc")
echo "$out"
[[ $(grep -c "sum 3 ok" <<< "$out") == 2 ]]
echo "install_test: ok"
