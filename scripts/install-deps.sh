#!/usr/bin/env bash
# Installs what ddprun needs from Debian's packages, by set. Idempotent: when the set is present it
# returns at once without touching apt.
#
#   scripts/install-deps.sh           everything: the main job's sets and the test suite's (scripts/test.sh)
#   scripts/install-deps.sh --main    the main job's (scripts/run-example.sh): --build and --torch
#   scripts/install-deps.sh --build   what building ddprun, ddprun-rendezvous and the runtime needs
#   scripts/install-deps.sh --torch   Debian's PyTorch 1.13, which the example's workers import
set -euo pipefail

# Building ddprun, ddprun-rendezvous and libddprun-runtime (scripts/build.sh --main).
build_packages=(
  build-essential cmake ninja-build pkg-config          # toolchain
  libboost-dev libboost-program-options-dev libboost-system-dev  # Boost.Asio, Program_options
  libspdlog-dev libfmt-dev libgloo-dev nlohmann-json3-dev
  libssl-dev                                            # OpenSSL: the token handshake (HMAC-SHA256, nonces), TLS
)
# torch 1.13: the example's workers (examples/train_ddp.py), the tests' anchors and real clients.
# Most of the main job's download and unpacking: libtorch1.13 depends on OpenCV, and through it on
# Qt, Mesa and FFmpeg (about 500 packages on a bare system).
torch_packages=(python3-torch)
# The test suite and the benchmarks, on top of the main job's sets.
test_packages=(
  catch2                                                # the unit tests
  python3-tqdm                                          # a real progress bar (tests/launcher/output_test.py)
  debootstrap                                           # the torch 2.6 chroot
  iproute2 procps psmisc util-linux time                # network namespaces, ps, fuser, flock, /usr/bin/time
  gdb                                                   # native stacks of hung workers (optional at run time)
  elfutils                                              # eu-stack: the same in ms, tried before gdb (optional)
  openssl                                               # the tests' TLS certificates (openssl req)
  etcd-server etcd-client                               # etcd 3.4: the etcd rendezvous' tests
  slurm-wlm munge                                       # a real one-node Slurm (tests/cluster)
  openssh-server openssh-client                         # ddprun --hosts over ssh and its tests
  python3-matplotlib                                    # scripts/bench.sh plot: the PNGs in docs/img
  python3-prometheus-client                             # /metrics parsed by a real Prometheus parser (tests)
  clang-format                                          # scripts/check-format.sh: the tree against .clang-format
  help2man dpkg-dev                                     # the .deb: man pages from --help, Depends (dpkg-shlibdeps)
)

case "${1:-}" in
  "") set_name=all; packages=("${build_packages[@]}" "${torch_packages[@]}" "${test_packages[@]}") ;;
  --main) set_name=main; packages=("${build_packages[@]}" "${torch_packages[@]}") ;;
  --build) set_name=build; packages=("${build_packages[@]}") ;;
  --torch) set_name=torch; packages=("${torch_packages[@]}") ;;
  *)
    echo "install-deps: error: unknown argument '$1'; use --main, --build, --torch or nothing (all)" >&2
    exit 2
    ;;
esac

# One dpkg-query for the whole set: a package it does not know is reported on stderr and left out.
mapfile -t installed < <(dpkg-query -W -f='${Package} ${Status}\n' "${packages[@]}" 2>/dev/null |
  awk '$NF == "installed" && $(NF - 1) == "ok" { print $1 }')
missing=()
for p in "${packages[@]}"; do
  [[ " ${installed[*]} " == *" $p "* ]] || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages of the $set_name set present"
  exit 0
fi
if [[ $EUID -ne 0 ]]; then
  echo "install-deps: error: missing packages (${missing[*]}); run as root or with sudo" >&2
  exit 1
fi
echo "install-deps: installing the $set_name set: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
log=$(mktemp -t ddprun-install-deps.XXXXXX)
apt-get update -qq
# --force-unsafe-io: dpkg writes the unpacked files without an fsync each; a crash mid-install is
# repaired by running this script again, as any interrupted apt-get is.
apt-get install -y -qq --no-install-recommends -o Dpkg::Options::=--force-unsafe-io "${missing[@]}" \
  > "$log" 2>&1 || {
  tail -20 "$log" >&2
  echo "install-deps: error: apt-get install failed (log: $log)" >&2
  exit 1
}
rm -f "$log"
echo "install-deps: the $set_name set installed"
