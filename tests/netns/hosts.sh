# Sourced by the network-namespace tests: N "hosts" (namespaces ${tag}1..${tag}N with addresses
# ${subnet}.1..N/24) joined by a bridge in the namespace ${tag}h, torn down on exit together with
# the test's background processes (${pids[@]}) and its scratch directory ($dir). Also sources
# waits.sh (bounded waits; a wait that gives up shows ${pids[@]} and the logs in $dir).
#
#   tag=xy$$; subnet=10.233.0; source hosts.sh; make_hosts 3

pids=()
dir=$(mktemp -d)
logs=()
netns_hosts=0
source "$(dirname "${BASH_SOURCE[0]}")/waits.sh"

delete_hosts() {
  stop_pids
  ip netns del "${tag}h" 2>/dev/null || true
  for ((i = 1; i <= netns_hosts; i++)); do ip netns del "${tag}$i" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap delete_hosts EXIT

# make_hosts N: exits 77 (skipped) without root or network namespaces.
make_hosts() {
  if [[ $EUID -ne 0 ]] || ! ip netns add "${tag}h" 2>/dev/null; then
    echo "skipped: needs root and network namespaces (ip netns add)"
    exit 77
  fi
  netns_hosts=$1
  ip -n "${tag}h" link add br0 type bridge
  ip -n "${tag}h" link set br0 up
  for ((i = 1; i <= netns_hosts; i++)); do
    local ns="${tag}$i"
    ip netns add "$ns"
    ip link add "v$i" netns "$ns" type veth peer name "b$i" netns "${tag}h"
    ip -n "${tag}h" link set "b$i" master br0 up
    ip -n "$ns" addr add "${subnet}.$i/24" dev "v$i"
    ip -n "$ns" link set lo up
    ip -n "$ns" link set "v$i" up
  done
}
