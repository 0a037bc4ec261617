#!/usr/bin/env bash
# The driver of `ddprun --hosts` (docs/ssh.md) without root, sshd or a network: ssh is a stand-in
# (fake_ssh.sh) that runs each host's command on this machine, so two real agents form one c10d
# job on 127.0.0.1. Checked: each host's lines whole and prefixed (a last line without a newline
# too), the job's exit code, SIGTERM passed on (143), kill -9 of the driver with nothing left, an
# unreachable host as one line with exit 255 and the other host's agent stopped; a host failing
# alone (exit 2) with the others stopped 5 s later; the job's token made by the driver, handed over
# on stdin, in no process's argv or environment and refused to torch's client; the user's own
# token file instead; ddprun under a path holding '='.
# tests/cluster/ssh_hosts_test.sh does the same with real sshd on network-namespace hosts.
#
#   ssh_driver_test.sh DDPRUN
set -euo pipefail
ddprun=$(realpath "$1")
here="$(cd "$(dirname "$0")" && pwd)"
pids=()
logs=()
dir=$(mktemp -d)
source "$here/../netns/waits.sh"
trap 'stop_pids; rm -rf "$dir"' EXIT
test_budget 100  # below CTest's 150 s

mkdir "$dir/bin"
ln -s "$here/fake_ssh.sh" "$dir/bin/ssh"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mark="sshdrv$$"
worker="$here/ssh_worker.sh"

drive() {  # drive NAME ARGS...: the driver in the background, $driver its pid
  local name=$1
  shift
  (cd "$dir" && exec env PATH="$dir/bin:$PATH" "$ddprun" --rdzv-endpoint "127.0.0.1:$port" "$@" \
     > "$dir/$name.out" 2> "$dir/$name.err") &
  driver=$!
  pids+=($driver)
  logs+=("$dir/$name.out" "$dir/$name.err")
}
source "$here/ssh_job.sh"

# 1. Two "hosts", one job of 2 x 2 ranks, lines prefixed; a host's last line without a newline
# comes whole too.
drive job --hosts hostA,hostB --nproc-per-node 2 --no-python "$worker" "$mark" report
wait_exit "$driver" 60 "the job's driver"
[[ $code -eq 0 ]] || fail "the job exited $code"
[[ $(lines job "^hostA: .*world=4 ") -eq 2 && $(lines job "^hostB: .*world=4 ") -eq 2 ]] \
  || fail "not 2 ranks of 4 on each host"
# The driver's signal bytes are the agent's alone: its workers read /dev/null.
[[ $(lines job " stdin=/dev/null$") -eq 4 ]] || fail "a worker's stdin is not /dev/null"
grep -q "^ddprun: starting 2 agent(s) over ssh on hostA, hostB (store 127.0.0.1:$port" "$dir/job.err" \
  || fail "no line saying where the job runs"
grep -qx "hostB: closing hostB" "$dir/job.err" || fail "a last line without a newline was not passed on whole"
echo "2 hosts: $(head -n 1 "$dir/job.out")"

# 2. The root cause's exit code comes back.
drive failing --hosts hostA,hostB --nproc-per-node 2 --no-python "$worker" "$mark" fail 2 9
wait_exit "$driver" 60 "the failing job's driver"
[[ $code -eq 9 ]] || fail "a job whose rank 2 exited 9 exited $code"
echo "a failing rank: exit $code"

# 3. SIGTERM to the driver: every host's agent stops its workers, the driver exits 143.
rm -f "$dir"/pids.*
drive term --hosts hostA,hostB --shutdown-timeout 5 --no-python "$worker" "$mark" wait "$dir"
wait_until 40 "2 workers wait" waiting term 2
kill -TERM "$driver"
wait_exit "$driver" 30 "the driver after SIGTERM"
[[ $code -eq 143 ]] || fail "the driver exited $code after SIGTERM"
wait_until 15 "nothing left after SIGTERM" nothing_left
echo "SIGTERM: exit 143, nothing left"

# 4. kill -9 of the driver: the agents' stdin ends, they stop their workers.
rm -f "$dir"/pids.*
drive kill9 --hosts hostA,hostB --shutdown-timeout 5 --no-python "$worker" "$mark" wait "$dir"
wait_until 40 "2 workers wait" waiting kill9 2
kill -9 "$driver"
killed=$SECONDS
wait_exit "$driver" 10 "the killed driver" 2>/dev/null
wait_until 20 "nothing left after kill -9 of the driver" nothing_left
echo "kill -9: nothing left after $((SECONDS - killed)) s"

# 5. An unreachable host: one line naming it, exit 255, the other agent stopped.
drive unreachable --hosts hostA,unreachable-host --no-python "$worker" "$mark" report
wait_exit "$driver" 30 "the driver with an unreachable host"
[[ $code -eq 255 ]] || fail "exit $code with an unreachable host, not 255"
[[ $(grep -c "^ddprun: error: host unreachable-host: ssh failed (exit 255): ssh: connect to host unreachable-host port 22: No route to host; " "$dir/unreachable.err") -eq 1 ]] \
  || fail "not one line naming the unreachable host"
wait_until 15 "host A's agent stopped" nothing_left
echo "unreachable: $(grep '^ddprun: error' "$dir/unreachable.err")"

# 6. A host whose agent refuses its input (exit 2) while the other waits for it in the rendezvous:
# 5 s later the driver stops the other, and exits 2.
drive badinput --hosts hostA,badinput-host --no-python "$worker" "$mark" report
started=$SECONDS
wait_exit "$driver" 30 "the driver with a host refusing its input"
[[ $code -eq 2 ]] || fail "exit $code with a host refusing its input, not 2"
grep -q "^ddprun: a host's agent failed and the others are still running 5 s later; stopping them$" \
  "$dir/badinput.err" || fail "no line saying the other hosts are stopped"
wait_until 15 "host A's agent stopped" nothing_left
echo "a host refusing its input: exit 2 after $((SECONDS - started)) s, the other host stopped"

# 7. Secure by default: the driver makes the job's token and hands it to each agent on its ssh
# stdin. While the job runs, both agents hold the same 64-hex token, no process shows it in its
# command line or environment, and torch's own TCPStore client is refused by the job's store.
rm -f "$dir"/pids.*
export FAKE_SSH_TOKEN_DIR=$dir
drive token --hosts hostA,hostB --shutdown-timeout 5 --no-python "$worker" "$mark" wait "$dir"
unset FAKE_SSH_TOKEN_DIR
wait_until 40 "2 workers wait" waiting token 2
grep -q "^ddprun: starting 2 agent(s) over ssh on hostA, hostB (.*, a job token made for this launch)$" \
  "$dir/token.err" || fail "the driver does not say it made the job's token"
grep -Eqx '[0-9a-f]{64}' "$dir/token.hostA" || fail "host A's agent got no 64-hex token on stdin"
cmp -s "$dir/token.hostA" "$dir/token.hostB" || fail "the two agents got different tokens"
token_nowhere_else "$dir/token.hostA"
echo "the token: on stdin of both agents, in no process's argv or environment ($(ls -d /proc/[0-9]* | wc -l) processes scanned)"
if /usr/bin/python3 -c "import torch" 2>/dev/null; then
  probe=$(timeout 30 /usr/bin/python3 "$here/../security/workers/torch_store_probe.py" 127.0.0.1 "$port" 5 2>&1 | tail -n 1) || true
  [[ $probe == refused:* ]] || fail "torch's TCPStore client without the token was not refused: $probe"
  echo "torch's client without the token: $probe"
else
  echo "(no torch in /usr/bin/python3: torch's client is not tried)"
fi
kill -TERM "$driver"
wait_exit "$driver" 30 "the token job's driver after SIGTERM"
[[ $code -eq 143 ]] || fail "the token job's driver exited $code after SIGTERM"
wait_until 15 "nothing left of the token job" nothing_left

# 8. The user's own token file: no token is made, each agent reads that file (no token line on
# stdin), and the job runs.
(umask 077 && openssl rand -hex 32 > "$dir/user_token")
rm -f "$dir"/token.host*
export FAKE_SSH_TOKEN_DIR=$dir
drive usertoken --hosts hostA,hostB --rdzv-conf "token_file=$dir/user_token" --no-python \
  "$worker" "$mark" report
unset FAKE_SSH_TOKEN_DIR
wait_exit "$driver" 60 "the driver of the job with the user's token file"
[[ $code -eq 0 ]] || fail "the job with the user's token file exited $code"
[[ $(lines usertoken "world=2 ") -eq 2 ]] || fail "not 2 ranks with the user's token file"
grep -q "^ddprun: starting 2 agent(s) over ssh on hostA, hostB (.*, the job's token file)$" \
  "$dir/usertoken.err" || fail "the driver does not say the job's token is the user's file"
[[ ! -e $dir/token.hostA ]] || fail "a token line went to the agents although the user gave a token file"
echo "the user's token file: the job ran on it, no token made"

# 9. ddprun installed under a path holding '=' (which env would take for an assignment).
mkdir -p "$dir/opt=1"
ln -s "$ddprun" "$dir/opt=1/ddprun"
drive eqpath --hosts hostA,hostB --ssh-ddprun "$dir/opt=1/ddprun" --no-python "$worker" "$mark" report
wait_exit "$driver" 60 "the driver of the job run from a path holding '='"
[[ $code -eq 0 ]] || fail "the job run from a path holding '=' exited $code"
[[ $(lines eqpath "world=2 ") -eq 2 ]] || fail "not 2 ranks run from a path holding '='"
echo "ddprun under $dir/opt=1: the job ran"
echo "PASS"
