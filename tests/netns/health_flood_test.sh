#!/usr/bin/env bash
# An outsider cannot starve /healthz: from another network namespace (another address), 500 idle
# and 500 slowloris connections are held against the real agent's /healthz
# (TORCHELASTIC_HEALTH_CHECK_PORT, DDPRUN_HEALTH_CHECK_ADDR=0.0.0.0, a sleeping worker) and
# against the real ddprun-rendezvous --health-port, re-opened as they are dropped; meanwhile 100
# probes from the server's own namespace, each as a kubelet makes it, are each answered 200
# within 1 s, and the job goes on running.
#
# Two hosts (tests/netns/hosts.sh): the server (10.234.9.1) and the attacker (10.234.9.2). The
# flood and the probe are tests/netns/health_flood.py.
#
#   health_flood_test.sh DDPRUN DAEMON      (exit 77 = skipped: needs root and `ip netns`)
set -euo pipefail
ddprun=$1
daemon=$2
here="$(cd "$(dirname "$0")" && pwd)"
flood="$here/health_flood.py"
tag="hzf$$"
subnet=10.234.9
source "$here/hosts.sh"
test_budget 120  # two thirds of CTest's 180 s: a wait that gives up has time to say what it saw
make_hosts 2
srv="${tag}1" att="${tag}2"

# The daemon: its store on loopback, its /healthz on every address of its host.
logs+=("$dir/daemon.out" "$dir/daemon.err")
ip netns exec "$srv" "$daemon" --host 127.0.0.1 --port 0 --health-port 0 --health-addr 0.0.0.0 \
  > "$dir/daemon.out" 2> "$dir/daemon.err" &
pids+=($!)
# The agent: one worker that sleeps, /healthz on every address as docs/status.md's Kubernetes
# example sets it.
logs+=("$dir/agent.err")
ip netns exec "$srv" env TORCHELASTIC_HEALTH_CHECK_PORT=0 DDPRUN_HEALTH_CHECK_ADDR=0.0.0.0 \
  LOGLEVEL=INFO "$ddprun" --standalone --nproc-per-node 1 --no-python sleep 300 \
  > "$dir/agent.out" 2> "$dir/agent.err" &
agent_pid=$!
pids+=($agent_pid)

wait_until 20 "the daemon says where /healthz is" grep -q "^health on " "$dir/daemon.out"
daemon_port=$(sed -n 's/^health on 0\.0\.0\.0://p' "$dir/daemon.out")
wait_until 30 "the agent says where /healthz is" grep -q "serving /healthz on" "$dir/agent.err"
agent_port=$(sed -n 's|.*serving /healthz on http://0\.0\.0\.0:\([0-9]*\)/healthz.*|\1|p' "$dir/agent.err")
[[ -n $daemon_port && -n $agent_port ]] || fail "no /healthz ports (daemon '$daemon_port', agent '$agent_port')"

# body PORT: the /healthz body, asked once from the server's namespace without a flood.
body() {
  ip netns exec "$srv" python3 -c '
import sys, urllib.request
print(urllib.request.urlopen(f"http://10.234.9.1:{sys.argv[1]}/healthz", timeout=5).read().decode())
' "$1" 2>/dev/null
}
running() { body "$agent_port" | grep -q '"state": *"running"'; }
wait_until 30 "the agent's worker is running (its /healthz says so)" running

# flood_and_probe NAME PORT: the flood from the attacker's namespace, held for the 100 probes.
flood_and_probe() {
  local name=$1 port=$2 log="$dir/flood.$1"
  logs+=("$log")
  ip netns exec "$att" python3 "$flood" flood 10.234.9.1 "$port" --idle 500 --slowloris 500 \
    --seconds 90 > "$log" 2>&1 &
  local flood_pid=$!
  pids+=($flood_pid)
  wait_until 30 "$name: the flood's 1000 connections are all connected" grep -q "^holding 1000" "$log"
  local seen="$dir/probe.$name" code=0
  logs+=("$seen")
  timeout "$(budget_left 40)" ip netns exec "$srv" python3 "$flood" probe 10.234.9.1 "$port" \
    --count 100 --within 1 > "$seen" 2>&1 || code=$?
  kill "$flood_pid" 2>/dev/null || true
  wait_exit "$flood_pid" 10 "$name: the flood"
  cat "$seen"
  echo "$name: the flood while probing: $(grep '^open' "$log" | tail -n 3 | tr '\n' ';') $(tail -n 1 "$log")"
  ((code == 0)) || fail "$name: not every probe was answered 200 within 1 s under the flood (exit $code)"
  grep -q "^probes: 100 of 100 answered 200 within 1.0 s" "$seen" || fail "$name: the probes' summary"
  # The flood was real: the server dropped its connections and it opened them again.
  local reopened
  reopened=$(sed -n 's/^flood ends: open [0-9]* reopened \([0-9]*\)$/\1/p' "$log")
  ((${reopened:-0} >= 1000)) || fail "$name: the server dropped only ${reopened:-no} flood connections"
}

flood_and_probe agent "$agent_port"
gone "$agent_pid" && fail "the agent ended under the flood"
running || fail "the agent's /healthz no longer says running after the flood: $(body "$agent_port")"
echo "agent: still running after the flood: $(body "$agent_port")"

flood_and_probe daemon "$daemon_port"
body "$daemon_port" | grep -q '"state": *"serving"' || fail "the daemon no longer serves: $(body "$daemon_port")"
echo "daemon: still serving after the flood"
