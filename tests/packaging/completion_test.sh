#!/usr/bin/env bash
# ddprun's bash completion (`ddprun completion bash`, the file the package installs) driven in a
# real bash: COMP_WORDS/COMP_CWORD set as readline sets them, _ddprun called, COMPREPLY checked.
#
#   completion_test.sh DDPRUN_BIN
set -euo pipefail
ddprun=$1
failures=0

script=$("$ddprun" completion bash)
# shellcheck disable=SC1090
source <(printf '%s\n' "$script")
complete -p ddprun | grep -q -- '-F _ddprun' || { echo "FAIL: no 'complete -F _ddprun ddprun'" >&2; exit 1; }

# expect "WANT" WORD...: the completion of the last WORD (the word under the cursor) after the
# others, as one line of sorted words; WANT "" for nothing offered (bash then lists files).
expect() {
  local want=$1
  shift
  COMP_WORDS=("$@")
  COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
  COMP_LINE="${COMP_WORDS[*]}"
  COMP_POINT=${#COMP_LINE}
  COMPREPLY=()
  _ddprun
  local got
  got=$(printf '%s\n' "${COMPREPLY[@]}" | sed '/^$/d' | LC_ALL=C sort | tr '\n' ' ' | sed 's/ $//')
  if [[ $got == "$want" ]]; then
    printf 'ok   %-45s -> %s\n' "${COMP_WORDS[*]}<TAB>" "${got:-(files)}"
  else
    printf 'FAIL %-45s -> got [%s], want [%s]\n' "${COMP_WORDS[*]}<TAB>" "$got" "$want" >&2
    failures=$((failures + 1))
  fi
}

expect "--rdzv-backend" ddprun --rdzv-b
expect "--rdzv_backend" ddprun --rdzv_b
expect "c10d etcd etcd-v2 etcd-v3 static" ddprun --rdzv-backend ""
expect "etcd etcd-v2 etcd-v3" ddprun --nproc-per-node 2 --rdzv-backend et
expect "c10d" ddprun --rdzv_backend = c
expect "c10d etcd etcd-v2 etcd-v3 static" ddprun --rdzv-backend =
expect "core-complex exclusive node socket" ddprun --numa-binding ""
expect "fork forkserver" ddprun --start-method f
expect "0 1 2 3" ddprun --redirects ""
expect "0 1 2 3" ddprun -t ""
expect "auto cpu gpu xpu" ddprun --nproc_per_node ""
expect "console dynamic_rendezvous null" ddprun --event-log-handler ""
expect "--standalone" ddprun --nnodes 2 --stand
expect "--numa-binding --numa_binding" ddprun --nu
expect "--max-restarts" ddprun --standalone --max-r
expect "--max-no-progress-restarts --max-node-failures" ddprun --standalone --max-no
expect "--health-check --health-check-timeout --health-cooldown" ddprun --health-c
expect "--post-round-hook --post_round_hook" ddprun --post
expect "--spares" ddprun --nnodes 2:2 --spa
# Progress from log lines and times in the prefix (docs/errors.md, "Progress from log lines").
expect "--progress-pattern" ddprun --progress-p
expect "--start-method --start-pattern --start-timeout" ddprun --start-
expect "--fail-pattern --fail_pattern" ddprun --fail
expect "--log-time" ddprun --log-t
# Subcommands as the first word; after one, its --help only.
expect "detach" ddprun det
expect "launch" ddprun lau
expect "--help -h" ddprun detach -
expect "" ddprun detach ./upload.sh
# Past the training script (or --), nothing of ddprun's: files for the script's arguments.
expect "" ddprun --standalone train.py --rdzv
expect "" ddprun -- --rdzv
# A free value: files (bash's default).
expect "" ddprun --log-dir ""

# Every subcommand the binary lists in --help is offered as the first word.
while read -r name _; do
  [[ -n $name ]] || continue
  COMP_WORDS=(ddprun "$name"); COMP_CWORD=1; COMPREPLY=(); _ddprun
  printf '%s\n' "${COMPREPLY[@]}" | grep -qx -- "$name" ||
    { echo "FAIL: subcommand $name (from --help) is not offered" >&2; failures=$((failures + 1)); }
done < <("$ddprun" --help | sed -n '/^subcommands/,$p' | tail -n +2)

# A shell it does not write for, or none: one line naming the usage, exit 2 (bad input).
for args in "zsh" ""; do
  set +e
  # shellcheck disable=SC2086  # "" is no argument at all
  err=$("$ddprun" completion $args 2>&1 >/dev/null)
  rc=$?
  set -e
  if [[ $rc -ne 2 || $(printf '%s\n' "$err" | wc -l) -ne 1 || $err != *"usage: ddprun completion bash"* ]]; then
    echo "FAIL: ddprun completion ${args:-(nothing)}: exit $rc, said: $err" >&2
    failures=$((failures + 1))
  fi
done

if ((failures > 0)); then
  echo "completion_test: $failures failure(s)" >&2
  exit 1
fi
echo "completion_test: all passed"
