#!/usr/bin/env python3
"""Job control (issue #19, point 5): Ctrl-Z in an interactive shell stops the whole job, workers
and their children included, and `fg` continues it; while it is stopped no timeout of the agent
counts. torchrun 1.13 (whose workers share its process group) is run the same way, side by side.

    job_control_test.py --ddprun BIN [--torchrun-python PY]

The shell is a real `bash -i` on a pseudo-terminal made here (python's pty module), so the
terminal driver turns ^Z into SIGTSTP for the foreground job and bash reports it "Stopped", as
for a user. The job (workers/job_control_worker.py, three ranks) runs with --exit-timeout 5 and
--hang-timeout 5, and is stopped for 7 s while two ranks wait quietly: were the stopped time
counted, they would be killed as hung at the `fg`.

Every wait is bounded and prints the terminal's transcript when it gives up.
"""
import argparse
import os
import pty
import re
import shlex
import signal
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from side_by_side import SKIP, TORCHRUN, torchrun_command  # noqa: E402
WORKER = os.path.join(HERE, "workers", "job_control_worker.py")
STOPPED_FOR = 7.0  # longer than --exit-timeout and --hang-timeout below
TIMEOUT = 5
# The whole test's end, well inside its CTest TIMEOUT (200 s): every wait takes what is left.
END = time.monotonic() + 170


def proc_stat(pid):
    """(state, ppid, session) of `pid`, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            text = stat.read()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return fields[0], int(fields[1]), int(fields[3])


class Terminal:
    """`bash -i` on a pseudo-terminal; what it shows is collected by a thread (so the job never
    blocks on a full terminal)."""

    def __init__(self, env):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            os.execvpe("bash", ["bash", "--norc", "--noprofile", "-i"], env)
        self.text = ""
        self.changed = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        while True:
            try:
                data = os.read(self.fd, 65536)
            except OSError:
                data = b""
            with self.changed:
                if not data:
                    self.text += "\n[terminal closed]"
                    self.changed.notify_all()
                    return
                self.text += data.decode(errors="replace").replace("\r", "")
                self.changed.notify_all()

    def send(self, data):
        os.write(self.fd, data)

    def wait_for(self, pattern, timeout, why, since=0):
        """The first match of `pattern` in the transcript after offset `since`; fails the test
        with the transcript if none within `timeout`."""
        regex = re.compile(pattern, re.M)
        timeout = max(0.0, min(timeout, END - time.monotonic()))
        with self.changed:
            found = self.changed.wait_for(lambda: regex.search(self.text, since), timeout)
            if found:
                return found
        self.fail(f"{why}: no {pattern!r} within {timeout} s")

    def fail(self, why):
        print(f"FAIL: {why}\n--- the terminal so far ---\n{self.text}\n---", flush=True)
        self.close()
        sys.exit(1)

    def close(self):
        """Ends the shell and every process of its session (the job included), and waits for it."""
        for pid in os.listdir("/proc"):
            if pid.isdigit() and (proc_stat(int(pid)) or ("", 0, 0))[2] == self.pid:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except OSError:
                    pass
        try:
            os.kill(self.pid, signal.SIGKILL)
        except OSError:
            pass
        os.waitpid(self.pid, 0)
        # The reader ends at the terminal's end (every process that had it is gone) and only then
        # is the descriptor closed: closed while the reader may still call read() on its number,
        # the next Terminal's pseudo-terminal could get that number and the old reader would take
        # the new terminal's output (torchrun's run lost its ranks' "ready" lines so).
        self.reader.join(timeout=10)
        os.close(self.fd)


def run_stopped_job(name, command, env):
    """Runs `command` in an interactive shell, stops it with ^Z once every rank is ready, checks
    that every worker and child is stopped (and stays so for STOPPED_FOR), continues it with `fg`
    and returns (its exit status, the transcript)."""
    term = Terminal(env)
    term.wait_for(r"\$ $", 30, f"{name}: the shell did not prompt")
    term.send(command.encode() + b"\n")
    ready = {}
    start = 0
    while len(ready) < 3:
        found = term.wait_for(r"ready rank (\d) pid (\d+) child (\d+)", 90,
                              f"{name}: {len(ready)} of 3 ranks ready", since=start)
        ready[int(found.group(1))] = (int(found.group(2)), int(found.group(3)))
        start = found.end()
    term.send(b"\x1a")  # Ctrl-Z
    stopped_at = term.wait_for(r"Stopped", 10, f"{name}: the shell did not say the job stopped").end()
    # Ranks 0 and 1 and rank 1's child; rank 2 exited (0) already.
    processes = {f"rank 0 (pid {ready[0][0]})": ready[0][0], f"rank 1 (pid {ready[1][0]})": ready[1][0],
               f"rank 1's child (pid {ready[1][1]})": ready[1][1]}
    launcher = proc_stat(ready[0][0])[1]
    processes[f"the launcher (pid {launcher})"] = launcher
    # A stop takes effect when the process next runs: on a loaded machine a runnable process
    # may wait its turn (state R) for a moment. Then every one must stay stopped.
    settle = time.monotonic() + 10
    while True:
        states = {what: (proc_stat(pid) or ("gone",))[0] for what, pid in processes.items()}
        running = {what: state for what, state in states.items() if state != "T"}
        if not running:
            break
        if time.monotonic() > settle:
            term.fail(f"{name}: not stopped 10 s after Ctrl-Z: {running}")
        time.sleep(0.05)
    deadline = time.monotonic() + STOPPED_FOR
    looks = 0
    while True:
        states = {what: (proc_stat(pid) or ("gone",))[0] for what, pid in processes.items()}
        running = {what: state for what, state in states.items() if state != "T"}
        if running:
            term.fail(f"{name}: stopped, then running again without fg, "
                      f"{time.monotonic() - deadline + STOPPED_FOR:.1f} s after: {running}")
        looks += 1
        if time.monotonic() >= deadline:
            break
        time.sleep(0.25)
    term.send(b"fg\n")
    for rank in (0, 1):
        term.wait_for(rf"done rank {rank}", 60, f"{name}: rank {rank} did not finish after fg",
                      since=stopped_at)
    term.wait_for(r"\$ $", 60, f"{name}: the job did not end after fg", since=stopped_at)
    term.send(b"echo JOBEND=$?\n")
    code = int(term.wait_for(r"JOBEND=(\d+)", 10, f"{name}: no exit status", since=stopped_at).group(1))
    text = term.text
    print(f"{name}: every worker, rank 1's child and the launcher stayed stopped for "
          f"{STOPPED_FOR:.0f} s ({looks} looks); after fg the job exited {code}", flush=True)
    term.send(b"exit\n")
    term.close()
    return code, text


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ddprun", required=True)
    parser.add_argument("--torchrun-python", default="/usr/bin/python3")
    args = parser.parse_args()
    if not os.path.exists("/bin/bash") and not os.path.exists("/usr/bin/bash"):
        print("skipped: no bash")
        return SKIP

    env = dict(os.environ, PS1="$ ", TERM="dumb", LOGLEVEL="INFO", PYTHON_EXEC=sys.executable)
    env.pop("PROMPT_COMMAND", None)
    command = (f"{args.ddprun} --standalone --nproc-per-node 3 --exit-timeout {TIMEOUT} "
               f"--hang-timeout {TIMEOUT} {WORKER}")
    code, text = run_stopped_job("ddprun", command, env)
    if code != 0 or "is hung" in text:
        print(f"FAIL: ddprun: after fg the job must finish with 0 and nothing hung (exit {code})\n"
              f"--- the terminal ---\n{text}", flush=True)
        return 1
    # The same round all along: the agent's own store did not take the stopped agent for lost (a
    # re-formed round would start the workers again from the beginning).
    if re.search(r"was lost|round 1:", text):
        print(f"FAIL: ddprun: the job re-formed after fg\n--- the terminal ---\n{text}", flush=True)
        return 1
    for line in (r"received SIGTSTP: stopping every worker", r"the job continues after \d+\.\d s stopped"):
        if not re.search(line, text):
            print(f"FAIL: ddprun's log lacks {line!r}\n--- the terminal ---\n{text}", flush=True)
            return 1

    if not os.path.exists(TORCHRUN) or not os.path.exists(args.torchrun_python):
        print(f"torchrun 1.13 side by side skipped: {TORCHRUN} or {args.torchrun_python} missing")
        return 0
    anchor_code, anchor = run_stopped_job(
        "torchrun 1.13", shlex.join(torchrun_command(args.torchrun_python, "--nproc_per_node", "3", WORKER)), env)
    if anchor_code != 0:
        print(f"FAIL: torchrun 1.13 did not finish the stopped job either (exit {anchor_code}): the "
              f"anchor is broken\n--- the terminal ---\n{anchor}", flush=True)
        return 1
    print(f"side by side: ddprun exit {code}, torchrun 1.13 exit {anchor_code}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
