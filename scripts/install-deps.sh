#!/usr/bin/env bash
# Installs what ddprun needs to build and test, from Debian's packages. Idempotent: when
# everything is present it returns at once without touching apt.
#
#   scripts/install-deps.sh
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config          # toolchain
  libboost-dev libboost-program-options-dev libboost-system-dev  # Boost.Asio, Program_options
  libspdlog-dev libfmt-dev catch2 libgloo-dev nlohmann-json3-dev
  python3-torch                                         # torch 1.13: anchors and real clients
  python3-tqdm                                          # a real progress bar (tests/launcher/output_test.py)
  debootstrap                                           # the torch 2.6 chroot
  iproute2 procps psmisc util-linux time                # network namespaces, ps, fuser, flock, /usr/bin/time
  gdb                                                   # native stacks of hung workers (optional at run time)
  elfutils                                              # eu-stack: the same in ms, tried before gdb (optional)
  libssl-dev                                            # OpenSSL: the token handshake (HMAC-SHA256, nonces), TLS
  openssl                                               # the tests' TLS certificates (openssl req)
  etcd-server etcd-client                               # etcd 3.4: the etcd rendezvous' tests
  slurm-wlm munge                                       # a real one-node Slurm (tests/cluster)
  openssh-server openssh-client                         # ddprun --hosts over ssh and its tests
  python3-matplotlib                                    # scripts/bench.sh plot: the PNGs in docs/img
  clang-format                                          # scripts/check-format.sh: the tree against .clang-format
  help2man dpkg-dev                                     # the .deb: man pages from --help, Depends (dpkg-shlibdeps)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi
if [[ $EUID -ne 0 ]]; then
  echo "install-deps: error: missing packages (${missing[*]}); run as root or with sudo" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" > /tmp/ddprun-install-deps.log 2>&1 || {
  tail -20 /tmp/ddprun-install-deps.log >&2
  echo "install-deps: error: apt-get install failed (log: /tmp/ddprun-install-deps.log)" >&2
  exit 1
}
echo "install-deps: done"
