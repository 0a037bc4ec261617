# Sourced by the network-namespace tests: bounded waits that say what they saw. The test sets one
# budget well below its CTest TIMEOUT; every wait takes at most what is left of it, and a wait that
# gives up prints the processes in ${pids[@]} (alive or not, the process tree under them) and the
# tails of the files in ${logs[@]} (or in $dir) before the test fails (CTest's own timeout kills
# without a word).
#
#   pids=(); logs=(); source waits.sh; test_budget 60
#   wait_until 10 "the daemon prints its port" grep -q "listening on" "$out"
#   wait_exit "$pid" 20 "agent 1"; echo "it exited $code"
#   read -r -t "$(budget_left 10)" word <&"$fd" || fail "no answer from the client"

support_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/../support" && pwd)"
budget_end=$((SECONDS + 60))

# test_budget SECONDS: the whole test is to be done within SECONDS from now.
test_budget() { budget_end=$((SECONDS + $1)); }

# budget_left SECONDS: SECONDS, or what is left of the budget if that is less (at least 1).
budget_left() {
  local left=$((budget_end - SECONDS))
  ((left < $1)) || left=$1
  ((left >= 1)) || left=1
  echo "$left"
}

# show_state: what the test's processes and logs look like now.
show_state() {
  local p
  echo "--- the test's processes (${#pids[@]}) ---"
  for p in "${pids[@]}"; do
    if [[ -n ${exit_codes[$p]:-} ]]; then
      echo "pid $p: exited with ${exit_codes[$p]}"
    elif kill -0 "$p" 2>/dev/null; then
      echo "pid $p: running: $(tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null)"
    else
      echo "pid $p: exited"
    fi
  done
  echo "--- the process tree under them now ---"
  python3 "$support_dir/jobs.py" tree "${pids[@]}" 2>&1 || true
  local f files=("${logs[@]}")
  ((${#files[@]})) || files=(${dir:+"$dir"/*})  # hosts.sh's scratch directory
  for f in "${files[@]}"; do
    [[ -f $f ]] || continue
    echo "--- $f (last 40 lines) ---"
    tail -n 40 "$f"
  done
}

# fail WHY: the FAIL line, what was seen, exit 1.
fail() {
  echo "FAIL: $*"
  show_state
  exit 1
}

# wait_until SECONDS WHAT COMMAND...: polls COMMAND every 0.1 s until it succeeds, for SECONDS at
# most (less if the budget is nearly spent); then fails, saying WHAT did not happen.
wait_until() {
  local seconds=$(budget_left "$1") what=$2
  shift 2
  local deadline=$((SECONDS + seconds))
  while ((SECONDS < deadline)); do
    if "$@"; then return 0; fi
    sleep 0.1
  done
  if "$@"; then return 0; fi
  fail "$what: not within $seconds s"
}

# wait_exit PID SECONDS WHAT: waits (bounded as wait_until) for the background process PID to
# exit and sets $code to its exit status.
declare -A exit_codes=()
gone() { ! kill -0 "$1" 2>/dev/null || grep -q '^[0-9]* (.*) Z' "/proc/$1/stat" 2>/dev/null; }
wait_exit() {
  wait_until "$2" "$3 exits" gone "$1"
  code=0
  wait "$1" || code=$?
  exit_codes[$1]=$code
}

# stop_pids: SIGTERM to every process in ${pids[@]}, SIGKILL to what is left after 5 s, and a
# bounded wait for them (a cleanup that cannot hang).
stop_pids() {
  local p deadline=$((SECONDS + 5))
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do
    while ((SECONDS < deadline)) && ! gone "$p"; do sleep 0.1; done
    kill -9 "$p" 2>/dev/null || true
  done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
