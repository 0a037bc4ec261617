#!/usr/bin/env bash
# A peer that vanishes without closing (its host died, its network was cut) must not hold a
# connection forever: the daemon's TCP keep-alive finds out and drops it, while a healthy
# connection that is merely idle stays open.
#
# Two network namespaces joined by a veth pair play the server host and the client host; the
# client host's link is then brought down, so no FIN or RST ever reaches the server.
#
#   half_open_test.sh DAEMON      (exit 77 = skipped: needs root and `ip netns`)
set -euo pipefail
daemon=$1
tag="ddp$$"
srv="${tag}s" cli="${tag}c"
log=$(mktemp)
pids=()
logs=("$log.out" "$log")
source "$(dirname "$0")/waits.sh"
test_budget 30  # half of CTest's 60 s: a wait that gives up has time to say what it saw
cleanup() {
  stop_pids
  ip netns del "$srv" 2>/dev/null || true
  ip netns del "$cli" 2>/dev/null || true
  rm -f "$log" "$log".*
}
trap cleanup EXIT

if [[ $EUID -ne 0 ]] || ! ip netns add "$srv" 2>/dev/null; then
  echo "skipped: needs root and network namespaces (ip netns add)"
  exit 77
fi
ip netns add "$cli"
ip link add "${tag}a" netns "$srv" type veth peer name "${tag}b" netns "$cli"
ip -n "$srv" addr add 10.231.7.1/24 dev "${tag}a"
ip -n "$cli" addr add 10.231.7.2/24 dev "${tag}b"
for ns in "$srv" "$cli"; do ip -n "$ns" link set lo up; done
ip -n "$srv" link set "${tag}a" up
ip -n "$cli" link set "${tag}b" up

ip netns exec "$srv" "$daemon" --host 10.231.7.1 --port 0 --keepalive-idle 1 \
  --keepalive-interval 1 --keepalive-probes 2 --log-level debug > "$log.out" 2> "$log" &
pids+=($!)
wait_until 10 "the daemon prints its port" grep -q "listening on" "$log.out"
port=$(sed -n 's/listening on .*://p' "$log.out")
[[ -n $port ]] || fail "daemon did not start"

# A client that holds a 2.x connection open and idle: handshake, then silence. It prints
# "ready", then on stdin "ping" it checks that the connection still answers.
client='
import socket, struct, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])))
s.sendall(b"\x00" + struct.pack("<I", 0x3C85F7CE)); s.sendall(b"\x0d\x01\x02\x03\x04")
assert s.recv(4) == b"\x01\x02\x03\x04"
print("ready", s.getsockname()[1], flush=True)
for line in sys.stdin:
    s.sendall(b"\x0d\x05\x06\x07\x08")
    s.settimeout(3)
    print("alive" if s.recv(4) == b"\x05\x06\x07\x08" else "dead", flush=True)
'
# Each client talks to this script through a pair of FIFOs.
start_client() {  # start_client NAME NETNS
  mkfifo "$log.$1.in" "$log.$1.out"
  ip netns exec "$2" python3 -c "$client" 10.231.7.1 "$port" < "$log.$1.in" > "$log.$1.out" &
  pids+=($!)
  exec {in_fd}> "$log.$1.in"
  exec {out_fd}< "$log.$1.out"
  eval "${1}_in=$in_fd ${1}_out=$out_fd"
}
word=
start_client remote "$cli"
read -r -t "$(budget_left 10)" word remote_port <&"$remote_out" || true
[[ $word == ready ]] || fail "remote client did not connect"
word=
start_client local "$srv"
read -r -t "$(budget_left 10)" word local_port <&"$local_out" || true
[[ $word == ready ]] || fail "local client did not connect"

# Cut the client host off: its packets (and the server's probes) go nowhere from now on.
ip -n "$cli" link set "${tag}b" down
cut_at=$SECONDS
# Keep-alive: idle 1 s, then 2 probes 1 s apart: about 3 s.
wait_until 15 "the vanished peer's connection is dropped" \
  grep -q "connection from 10.231.7.2:$remote_port closed" "$log"
echo "vanished peer dropped after $((SECONDS - cut_at)) s: $(grep "10.231.7.2:$remote_port closed" "$log" | sed 's/.*closed: //')"

# The idle but healthy connection is still served.
echo ping >&"$local_in"
answer=
read -r -t "$(budget_left 5)" answer <&"$local_out" || true
[[ $answer == alive ]] || fail "the healthy idle connection was closed too (answer: '$answer')"
if grep -q "10.231.7.1:$local_port closed" "$log"; then
  fail "the healthy idle connection was closed"
fi
echo "healthy idle connection still served"
