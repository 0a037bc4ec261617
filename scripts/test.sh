#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs dependencies, builds the torch 2.6 chroot
# and the package test's bookworm root (each cached after the first time), checks every C++ file
# against .clang-format, builds ddprun, runs every test with CTest, then runs the Catch2 tests
# again under AddressSanitizer + UBSan.
#
#   scripts/test.sh            everything
#   scripts/test.sh --quick    skip the sanitizer pass
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS

scripts/install-deps.sh
if ! scripts/setup-torch2-chroot.sh; then
  echo "test: warning: the torch 2.6 chroot could not be built; tests labelled torch2 will skip" >&2
fi
if ! scripts/setup-deb-root.sh; then
  echo "test: warning: the bookworm root could not be built; the package test will skip" >&2
fi
scripts/check-format.sh
scripts/build.sh

# Network-namespace tests need root; gpu tests skip without a GPU (exit code 77 = skipped).
ctest --test-dir build --output-on-failure -j 2 --timeout 600

if [[ "${1:-}" != "--quick" ]]; then
  scripts/build.sh --asan
  ctest --test-dir build-asan --output-on-failure -j 2 --timeout 900 -L 'unit|integration' -LE 'torch|netns|gpu'
fi
echo "test: all tests passed in $((SECONDS - started)) s"
