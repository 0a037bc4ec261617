#!/bin/sh
# --numa-binding with the real agent where no GPU is visible (CUDA_VISIBLE_DEVICES empty, whatever
# the machine has): torchrun raises from torch.cuda at start; ddprun says so in one line, exits 2
# and starts no worker.
# Usage: numa_binding_test.sh DDPRUN
set -u
ddprun=$1
tmp=$(mktemp -d /tmp/ddprun-numa-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
CUDA_VISIBLE_DEVICES= timeout 30 "$ddprun" --standalone --nproc-per-node 2 --numa-binding node \
  --no-python /bin/sh -c "touch $tmp/ran" >"$tmp/out" 2>"$tmp/err"
code=$?
fail() {
  echo "FAIL: $1 (exit $code)"
  echo "--- stderr:"; cat "$tmp/err"; echo "--- stdout:"; cat "$tmp/out"
  exit 1
}
[ "$code" -eq 2 ] || fail "exit code is not 2"
[ ! -e "$tmp/ran" ] || fail "a worker ran"
grep -q "^ddprun: error: --numa-binding node: no GPU is visible" "$tmp/err" ||
  fail "no line saying that no GPU is visible"
[ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "more than one line on stderr"
echo "ok: $(cat "$tmp/err")"
