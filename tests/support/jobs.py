"""What the Python test drivers share about the processes they run (the C++ side: waits.h).

Every wait is bounded by one Deadline for the whole test, well below its CTest TIMEOUT, and when a
wait gives up the driver prints what it saw before it fails: each process's exit status or that it
still runs, the process tree under them, and their output so far. (CTest's own timeout kills
without a word.)

    from jobs import Deadline, Job, give_up
    deadline = Deadline(150)
    job = Job([binary, "--port", "0"], name="daemon")
    line = job.read_line(deadline.cap(10)) or give_up("the daemon did not start", [job])

Also a command: `jobs.py tree PID...` prints that process tree (tests/netns/waits.sh uses it).
"""
import os
import signal
import subprocess
import sys
import threading
import time

PS = ["ps", "-eo", "pid,ppid,pgid,sid,stat,etime,args", "--forest"]


class Deadline:
    """A point in time the test must be done by; waits take what is left of it."""

    def __init__(self, seconds):
        self.end = time.monotonic() + seconds

    def left(self):
        return max(0.0, self.end - time.monotonic())

    def cap(self, seconds):
        """`seconds`, or what is left if that is less."""
        return min(seconds, self.left())


def process_tree(roots):
    """`ps ... --forest`, only the rows of `roots`, their descendants, and whatever is in a process
    group or session one of them leads."""
    try:
        text = subprocess.run(PS, capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired) as error:
        return "(no process tree: %s)\n" % error
    header, *rows = text.splitlines()
    parsed = []
    for row in rows:
        fields = row.split(None, 4)
        try:
            parsed.append((int(fields[0]), int(fields[1]), int(fields[2]), int(fields[3]), row))
        except (ValueError, IndexError):
            continue
    wanted = {int(p) for p in roots}
    wanted |= {pid for pid, _, pgid, sid, _ in parsed if pgid in wanted or sid in wanted}
    grew = True
    while grew:  # and every descendant, whatever its group or session
        before = len(wanted)
        wanted |= {pid for pid, ppid, _, _, _ in parsed if ppid in wanted}
        grew = len(wanted) != before
    shown = [row for pid, _, _, _, row in parsed if pid in wanted]
    if not shown:
        shown = ["(none of them, nor anything they started, is still there)"]
    return "\n".join([header] + shown) + "\n"


class Job:
    """A process whose stdout and stderr are collected by threads (a chatty child never blocks on
    a full pipe, and several can be waited for at once). It leads its own session, so that
    kill() reaches what it started."""

    def __init__(self, argv, name=None, **popen):
        self.name = name or os.path.basename(argv[0])
        self.argv = list(argv)
        self._out, self._err = [], []
        self._lines = []
        self._changed = threading.Condition()
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     start_new_session=True, **popen)
        self.pid = self.proc.pid
        self._readers = [threading.Thread(target=self._drain, args=(self.proc.stdout, self._out),
                                          daemon=True),
                         threading.Thread(target=self._drain, args=(self.proc.stderr, self._err),
                                          daemon=True)]
        for reader in self._readers:
            reader.start()

    def _drain(self, stream, chunks):
        for line in iter(stream.readline, b""):
            with self._changed:
                chunks.append(line.decode(errors="replace"))
                if chunks is self._out:
                    self._lines.append(chunks[-1])
                self._changed.notify_all()
        with self._changed:
            chunks.append("")  # closed
            self._changed.notify_all()

    @property
    def output(self):
        with self._changed:
            return "".join(self._out)

    @property
    def errors(self):
        with self._changed:
            return "".join(self._err)

    @property
    def returncode(self):
        return self.proc.poll()

    def read_line(self, timeout):
        """The next stdout line (without its newline), or None if none comes within `timeout`."""
        with self._changed:
            self._changed.wait_for(lambda: self._lines or (self._out and self._out[-1] == ""),
                                   timeout)
            if not self._lines or self._lines[0] == "":
                return None
            return self._lines.pop(0).rstrip("\n")

    def wait(self, timeout):
        """The exit status, or None if it still runs after `timeout` seconds."""
        try:
            code = self.proc.wait(timeout=max(0.0, timeout))
        except subprocess.TimeoutExpired:
            return None
        for reader in self._readers:  # the last output (unless a straggler holds the pipes)
            reader.join(timeout=2)
        return code

    def signal(self, sig):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)

    def kill(self, grace=5):
        """SIGTERM to its process group (a launcher passes it on to its workers), then SIGKILL
        after `grace` seconds; each wait bounded."""
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5)):
            if self.proc.poll() is not None:
                return
            try:
                os.killpg(self.pid, sig)
            except (ProcessLookupError, PermissionError):
                return
            self.wait(wait)

    def describe(self, tail=6000):
        code = self.proc.poll()
        state = "still running" if code is None else "exited with %d" % code
        parts = ["%s (pid %d), %s: %s" % (self.name, self.pid, state, " ".join(self.argv))]
        for what, text in (("stdout", self.output), ("stderr", self.errors)):
            if len(text) > tail:
                text = "[... %d characters before ...]%s" % (len(text) - tail, text[-tail:])
            parts.append("--- its %s so far ---\n%s" % (what, text.rstrip("\n")))
        return "\n".join(parts) + "\n"


def describe(jobs):
    """Each job's state and output so far, then the process tree under all of them."""
    return "".join(j.describe() for j in jobs) + "--- the process tree under them now ---\n" + \
        process_tree([j.pid for j in jobs])


def give_up(why, jobs=()):
    """Prints `why` and what was seen of `jobs`, stops them, and fails the test (exit 1)."""
    print("FAIL: %s" % why, file=sys.stderr)
    if jobs:
        print(describe(jobs), file=sys.stderr, end="")
    for job in jobs:
        job.kill()
    sys.exit(1)


def wait_all(jobs, deadline, what, also=()):
    """Waits for every job to exit within the deadline; if one does not, gives up (give_up),
    describing `jobs` and `also` (the servers they talk to, say)."""
    for job in jobs:
        if job.wait(deadline.left()) is None:
            give_up("%s: not finished within the test's deadline" % what, list(jobs) + list(also))


def run(argv, timeout, name=None, **popen):
    """Runs `argv` to its end within `timeout` seconds and returns its Job (returncode, output,
    errors); gives up, saying what it saw, if it does not end in time."""
    job = Job(argv, name=name, **popen)
    if job.wait(timeout) is None:
        give_up("%s did not finish within %.0f s" % (job.name, timeout), [job])
    return job


# The exit code CTest reads as "skipped" (SKIP_RETURN_CODE), e.g. when the torch 2.6 chroot is absent.
SKIP = 77


def torch_version(python, timeout):
    """torch's version under `python`, or None when `python` exits SKIP (the caller then skips,
    the reason printed); a `python` without torch fails the test with one line."""
    probe = run([python, "-c", "import torch; print(torch.__version__)"], timeout,
                name="torch probe")
    if probe.returncode == SKIP:
        print(probe.errors.strip())
        return None
    if probe.returncode != 0:
        sys.exit(f"{python} has no torch: {probe.errors.strip()}")
    return probe.output.strip()


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "tree":
        sys.stdout.write(process_tree(sys.argv[2:]))
    else:
        sys.exit("usage: jobs.py tree PID...")
