#!/usr/bin/env bash
# `ddprun --hosts` / `--hostfile` (docs/ssh.md) across three "hosts": network namespaces joined
# by a bridge (tests/netns/hosts.sh), each running Debian's sshd with host and user keys this test
# makes in its scratch directory. The driver runs in host 1's namespace with the test's key in
# DDPRUN_SSH_OPTIONS. Checked: a job over --hosts (output prefixed with the host, one world of 4,
# forwarded variables, the remote cwd), real DDP training on 4 ranks (through the store's token,
# which the driver made), and its exit code when a rank fails; a job over --hostfile with
# --include (slots -> CUDA_VISIBLE_DEVICES); the job's token on each agent's stdin and in no
# process's argv or environment, torch's client refused; Ctrl-C (SIGINT to the driver) and
# `kill -9` of the driver with nothing of the job left on any host; an address nobody has: one
# line naming it, in bounded time, and the other host's agent stopped; a refused login (host 4's
# sshd knows no key) likewise.
#
#   ssh_hosts_test.sh DDPRUN      (exit 77 = skipped: needs root, `ip netns` and sshd)
set -euo pipefail
ddprun=$(realpath "$1")
here="$(cd "$(dirname "$0")" && pwd)"
worker="$here/ssh_worker.sh"
tag="ds$$"
subnet=10.241.0
source "$here/../netns/hosts.sh"
if [[ ! -x /usr/sbin/sshd || ! -x /usr/bin/ssh ]]; then
  echo "skipped: needs OpenSSH's sshd and ssh (apt-get install openssh-server openssh-client)"
  exit 77
fi
make_hosts 4
# Every host's interface is eth0, as on a real cluster: torch's Gloo is told it with
# GLOO_SOCKET_IFNAME, one value forwarded to every host (the namespaces share one hostname, which
# resolves to 127.0.x.1: without it Gloo would listen there).
for ((i = 1; i <= 4; i++)); do
  ip -n "${tag}$i" link set "v$i" down
  ip -n "${tag}$i" link set "v$i" name eth0
  ip -n "${tag}$i" link set eth0 up
done
test_budget 170  # below CTest's 200 s: a wait that gives up has time to say what it saw

# Keys: one host key for every sshd, one user key in their authorized_keys.
ssh-keygen -q -t ed25519 -N '' -f "$dir/host_key"
ssh-keygen -q -t ed25519 -N '' -f "$dir/user_key"
cp "$dir/user_key.pub" "$dir/authorized_keys"
: > "$dir/no_keys"  # host 4 refuses every login
chmod 600 "$dir/host_key" "$dir/user_key" "$dir/authorized_keys" "$dir/no_keys"
mkdir -p /run/sshd  # sshd's privilege-separation directory (Debian's package makes it at boot)
for i in 1 2 3 4; do
  keys="$dir/authorized_keys"
  [[ $i -ne 4 ]] || keys="$dir/no_keys"
  cat > "$dir/sshd_config.$i" <<CONFIG
ListenAddress ${subnet}.$i
Port 22
HostKey $dir/host_key
AuthorizedKeysFile $keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PidFile none
LogLevel VERBOSE
CONFIG
  ip netns exec "${tag}$i" /usr/sbin/sshd -D -f "$dir/sshd_config.$i" -E "$dir/sshd.$i.log" &
  pids+=($!)
done
listening() { ip netns exec "${tag}1" bash -c "exec 3<>/dev/tcp/${subnet}.$1/22" 2>/dev/null; }
for i in 1 2 3 4; do
  for _ in $(seq 50); do listening "$i" && break; sleep 0.1; done
  if ! listening "$i"; then
    echo "skipped: sshd did not start in host $i's namespace:"
    tail -n 5 "$dir/sshd.$i.log" 2>/dev/null || true
    exit 77
  fi
done
export DDPRUN_SSH_OPTIONS="-i $dir/user_key -o UserKnownHostsFile=/dev/null -o StrictHostKeyChecking=no -o LogLevel=ERROR"
mark="sshjob$$"
logs=("$dir"/sshd.{1,2,3,4}.log)
h1=${subnet}.1 h2=${subnet}.2 h3=${subnet}.3 h4=${subnet}.4

# drive NAME ARGS...: the driver in host 1's namespace, in the background; $driver is its pid.
drive() {
  local name=$1
  shift
  (cd "$dir" && exec ip netns exec "${tag}1" env SSH_TEST_FORWARDED=yes NCCL_TEST_SETTING=nccl \
     PYTHON_EXEC=/usr/bin/python3 GLOO_SOCKET_IFNAME=eth0 \
     "$ddprun" "$@" > "$dir/$name.out" 2> "$dir/$name.err") &
  driver=$!
  pids+=($driver)
  logs+=("$dir/$name.out" "$dir/$name.err")
}
source "$here/ssh_job.sh"

# 1. --hosts: one job of 2 hosts x 2 workers; every line comes back with its host in front.
drive hosts --hosts "$h1,$h2" --nproc-per-node 2 --forward-env SSH_TEST_FORWARDED \
  --no-python "$worker" "$mark" report
wait_exit "$driver" 60 "the --hosts job's driver"
[[ $code -eq 0 ]] || fail "the --hosts job exited $code"
for h in "$h1" "$h2"; do
  [[ $(lines hosts "^$h: .*rank=[0-3] world=4 ") -eq 2 ]] || fail "host $h did not run 2 ranks of 4"
done
[[ $(lines hosts "forwarded=yes nccl=nccl run_id=ssh-[0-9a-f]* cwd=$dir stdin=/dev/null\$") -eq 4 ]] \
  || fail "the forwarded variables, the run id, the working directory or stdin (/dev/null) differ on the hosts"
grep -q "^$h1: .*group_rank=0 " "$dir/hosts.out" || fail "the first host is not group rank 0"
echo "--hosts: 4 ranks on 2 hosts, each line prefixed: $(head -n 1 "$dir/hosts.out")"

# 1b. Real DDP training (examples/train_ddp.py: gloo, DDP, rank 0 checks the loss and that every
# rank holds the same parameters) across the two hosts; PYTHON_EXEC reaches them (PYTHON*).
if /usr/bin/python3 -c "import torch" 2>/dev/null; then
  drive ddp --hosts "$h1,$h2" --nproc-per-node 2 --forward-env GLOO_SOCKET_IFNAME \
    "$here/../../examples/train_ddp.py" --epochs 2 \
    --checkpoint "$dir/model.pt"
  wait_exit "$driver" 100 "the DDP job's driver"
  [[ $code -eq 0 ]] || fail "the DDP job over ssh exited $code"
  grep -E "^$h1: \[default0\]:OK: loss .* all 4 ranks hold identical parameters" "$dir/ddp.out" \
    || fail "rank 0 did not confirm DDP training on 4 ranks"
  [[ -f $dir/model.pt ]] || fail "rank 0 saved no checkpoint"
else
  echo "(no torch in /usr/bin/python3: the DDP job over ssh is not run)"
fi

# 2. The job's exit code comes back: rank 3 exits 7, the root cause's code (docs/errors.md).
drive failing --hosts "$h1,$h2" --nproc-per-node 2 --no-python "$worker" "$mark" fail 3 7
wait_exit "$driver" 60 "the failing job's driver"
[[ $code -eq 7 ]] || fail "a job whose rank 3 exited 7 exited $code, not 7"
echo "a failing rank: the driver exited $code"

# 3. --hostfile with --include: host 1 whole (2 slots), host 3 only slot 1; host 2 left out.
printf '# the test hosts\n%s slots=2\n\n%s slots=2  # a comment\n%s slots=2\n' "$h1" "$h2" "$h3" \
  > "$dir/hostfile"
drive hostfile --hostfile "$dir/hostfile" --include "$h1@$h3:1" --no-python "$worker" "$mark" report
wait_exit "$driver" 60 "the --hostfile job's driver"
[[ $code -eq 0 ]] || fail "the --hostfile job exited $code"
[[ $(lines hostfile "^$h1: .*world=3 .*cvd=unset") -eq 2 ]] || fail "host 1 did not run 2 ranks of 3"
[[ $(lines hostfile "^$h3: .*world=3 .*cvd=1 ") -eq 1 ]] || fail "host 3 did not run 1 rank on GPU 1"
[[ $(lines hostfile "^$h2: ") -eq 0 ]] || fail "host 2 ran although --include left it out"
echo "--hostfile --include: 2 ranks on host 1, 1 on host 3 with CUDA_VISIBLE_DEVICES=1"

# 4. Ctrl-C: SIGINT to the driver reaches every host's agent, which stops its workers. Meanwhile,
# the job's token: the driver made one (no token_file given) and each agent got it over its ssh
# session: ddprun on the hosts is a tap that keeps the first line of its stdin ($dir/token.PID)
# and hands the agent the same bytes and the rest. All three hold one token, no process shows it
# in its command line or environment, and torch's own TCPStore client is refused by the store.
cat > "$dir/ddprun-tap" <<TAP
#!/usr/bin/env bash
IFS= read -r line
(umask 077 && printf '%s\\n' "\$line" > "$dir/token.\$\$")
{ printf '%s\\n' "\$line"; exec cat; } | exec "$ddprun" "\$@"
TAP
chmod 700 "$dir/ddprun-tap"
rm -f "$dir"/pids.* "$dir"/token.*
drive sigint --hosts "$h1,$h2,$h3" --shutdown-timeout 5 --ssh-ddprun "$dir/ddprun-tap" \
  --no-python "$worker" "$mark" wait "$dir"
wait_until 40 "3 workers wait" waiting sigint 3
tokens=("$dir"/token.*)
[[ ${#tokens[@]} -eq 3 ]] || fail "not 3 agents read a token line: ${tokens[*]}"
[[ $(sort -u "${tokens[@]}" | wc -l) -eq 1 ]] || fail "the agents got different tokens"
grep -Eqx '[0-9a-f]{64}' "${tokens[0]}" || fail "the agents' token is not 64 hex characters"
token_nowhere_else "${tokens[0]}"
if /usr/bin/python3 -c "import torch" 2>/dev/null; then
  probe=$(timeout 30 ip netns exec "${tag}2" /usr/bin/python3 \
    "$here/../security/workers/torch_store_probe.py" "$h1" 29400 5 2>&1 | tail -n 1) || true
  [[ $probe == refused:* ]] || fail "torch's TCPStore client from host 2 was not refused: $probe"
fi
echo "the job's token: made by the driver, on 3 agents' stdin, in no argv or environment; torch's client: ${probe:-not tried}"
kill -INT "$driver"
wait_exit "$driver" 30 "the driver after SIGINT"
[[ $code -eq 130 ]] || fail "the driver exited $code after SIGINT, not 130"
wait_until 15 "nothing of the job is left after Ctrl-C" nothing_left
echo "Ctrl-C: the driver exited 130, nothing left on any host"

# 5. kill -9 of the driver: its ssh clients die with it, each remote agent sees its stdin close
# and stops its workers.
rm -f "$dir"/pids.*
drive kill9 --hosts "$h1,$h2,$h3" --shutdown-timeout 5 --no-python "$worker" "$mark" wait "$dir"
wait_until 40 "3 workers wait" waiting kill9 3
kill -9 "$driver"
killed=$SECONDS
wait_exit "$driver" 10 "the killed driver" 2>/dev/null
wait_until 20 "nothing of the job is left after kill -9 of the driver" nothing_left
echo "kill -9: nothing left on any host after $((SECONDS - killed)) s"

# 6. An address nobody has: one line naming it within ssh's ConnectTimeout (plus ARP's ~3 s),
# exit 255, and host 1's agent (waiting for the missing node) stopped.
nobody=${subnet}.99
drive unreachable --hosts "$h1,$nobody" --ssh-options="$DDPRUN_SSH_OPTIONS -o ConnectTimeout=4" \
  --no-python "$worker" "$mark" report
started=$SECONDS
wait_exit "$driver" 40 "the driver with an unreachable host"
[[ $code -eq 255 ]] || fail "the driver exited $code with an unreachable host, not 255"
grep "ddprun: error: host $nobody: " "$dir/unreachable.err" || fail "no line names host $nobody"
wait_until 15 "host 1's agent stopped" nothing_left
echo "unreachable host: exit 255 after $((SECONDS - started)) s"

# 7. A refused login (IdentitiesOnly: no other key of this machine's is tried): the same.
drive refused --hosts "$h1,$h4" --ssh-options="$DDPRUN_SSH_OPTIONS -o IdentitiesOnly=yes" \
  --no-python "$worker" "$mark" report
started=$SECONDS
wait_exit "$driver" 40 "the driver with a refused login"
[[ $code -eq 255 ]] || fail "the driver exited $code with a refused login, not 255"
[[ $(grep -c "^ddprun: error: host $h4: ssh failed (exit 255): .*Permission denied" "$dir/refused.err") -eq 1 ]] \
  || fail "not one line naming host $h4 and the refused login"
wait_until 15 "host 1's agent stopped" nothing_left
echo "refused login: exit 255 after $((SECONDS - started)) s: $(grep '^ddprun: error' "$dir/refused.err")"
echo "PASS"
