# Sourced by the ssh launch tests (ssh_driver_test.sh, ssh_hosts_test.sh): reading what a driver
# run NAME wrote ($dir/NAME.out) and what of the job still runs. Every process of the job
# carries $mark in its command line; waiting workers write their pids to $dir/pids.RANK.

# lines NAME PATTERN: how many of the run's output lines match.
lines() { grep -c "$2" "$dir/$1.out" 2>/dev/null || true; }
# What of the job is still running anywhere (the test's hosts share this pid namespace).
leftovers() {
  pgrep -af "$mark" | grep -v pgrep || true
  local f p
  for f in "$dir"/pids.*; do
    [[ -f $f ]] || continue
    for p in $(cat "$f"); do kill -0 "$p" 2>/dev/null && echo "worker process $p of $f"; done
  done
  return 0
}
nothing_left() { [[ -z $(leftovers) ]]; }
# waiting NAME N: N workers of the run have said they wait.
waiting() { [[ $(lines "$1" 'waiting$') -eq $2 ]]; }

# holders FILE: every process whose command line or environment holds the line in FILE (read
# from the file: the token is on no command line of the test's either), as "PID NAME".
holders() {
  local p
  for p in /proc/[0-9]*; do
    if grep -qaFf "$1" "$p/cmdline" "$p/environ" 2>/dev/null; then
      echo "${p#/proc/} $(cat "$p/comm" 2>/dev/null)"
    fi
  done
  return 0
}
# token_nowhere_else FILE: fails unless no process holds the token in FILE in its command line or
# environment. The scan is shown to see a copy where there is one: a process of the test's own,
# given it in its environment, must be the one it finds.
token_nowhere_else() {
  (export PLANTED="$(cat "$1")" && exec sleep 60) &
  local planted=$! seen
  pids+=($planted)
  wait_until 5 "the planted process runs" grep -qaFf "$1" "/proc/$planted/environ"
  seen=$(holders "$1")
  kill "$planted"
  [[ $seen == "$planted sleep" ]] || fail "the job's token is in a process's argv or environment: $seen"
}
