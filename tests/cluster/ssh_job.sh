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
