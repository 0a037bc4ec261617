#!/usr/bin/env bash
# ssh's stand-in for ssh_driver_test.sh: skips the options up to "--", then takes HOST COMMAND.
# A host named unreachable* fails as ssh does (its message on stderr, exit 255), one named
# badinput* as an agent refusing its input there (exit 2) would; any other runs
# COMMAND here under bash as sshd would (then says it closes, without a newline), as a child (not exec'd: like ssh and sshd, this process
# stands between the driver and the agent, and the agent's stdin is the driver's pipe).
# With FAKE_SSH_TOKEN_DIR set, a command with --token-from-stdin has its first stdin line kept
# there for the test.
while [[ $# -gt 0 && $1 != -- ]]; do shift; done
shift
host=$1
command=$2
if [[ $host == badinput* ]]; then
  echo "ddprun: error: a stand-in for bad input on $host" >&2
  exit 2
fi
if [[ $host == unreachable* ]]; then
  echo "ssh: connect to host $host port 22: No route to host" >&2
  exit 255
fi
code=0
if [[ -n ${FAKE_SSH_TOKEN_DIR:-} && $command == *"'--token-from-stdin'"* ]]; then
  # The test reads the job's token the driver writes first on stdin ($dir/token.HOST, mode 600),
  # to look for it in every process; the agent gets the same bytes, then the rest of the pipe.
  IFS= read -r line
  (umask 077 && printf '%s\n' "$line" > "$FAKE_SSH_TOKEN_DIR/token.$host")
  { printf '%s\n' "$line"; exec cat; } | bash -c "$command" || code=$?
else
  bash -c "$command" || code=$?
fi
# A last line without a newline, as ssh's own "Connection to HOST closed." can come: the driver
# must pass it on whole.
printf 'closing %s' "$host" >&2
exit "$code"
