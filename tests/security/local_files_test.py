#!/usr/bin/env python3
"""The files a root agent makes and reads, against another (unprivileged) user of the node and
against its own workers (docs/security.md, "On the node"; issue #18). Each scenario runs the real
ddprun as root, with `--no-python` sh workers (no torch needed), and the other user is
tests/security/local_user.py's `ddprun-attacker` (exit 77, skipped, where it cannot be had).

    local_files_test.py --ddprun BIN --rendezvous BIN --scenario NAME

  planted-scratch   the other user plants directories and links at every name the agent could
                    use in a shared TMPDIR (the old scratch pattern ddprun-<run id>-<pid> and the
                    old temporary name of the parent's error file, <file>.ddprun-<pid>.tmp, for
                    the next 2000 pids), each leading to a root-only file or directory; a root job
                    that fails, with a hung worker (stack dump) and a parent error file, runs: no
                    file outside the job's own directories changes
  log-dir-others    a --log-dir every user can write into, or the other user's: exit 2, one line;
                    one its group can write into: one warning line, the job runs; a TMPDIR every
                    user can write into: exit 2, one line
  error-file-huge   a worker leaves a 1 GiB sparse file as its error file, a link to one, a link
                    to /: the agent's peak RSS stays small, the summary says what it did not read
  error-file-fifo   a worker's error file is a FIFO; and the root cause's is swapped for one after
                    the agent read it (before the parent's copy): each job ends, with the summary,
                    and the parent's error file is written
  token-other-owner a mode-600 token file that the other user owns (and so can read and change):
                    the agent and ddprun-rendezvous exit 2, one line (token_test.py's other_owner)
  token-fifo        a FIFO at the token path: agent and daemon exit 2 at once (not blocked), one line
                    (token_test.py's token_fifo)
  kill9-leftovers   after kill -9 of the agent, none of its directories (scratch, private) remain,
                    and none of its workers, within a bounded wait

Every wait is bounded and prints what it saw when it gives up (tests/support/jobs.py); every
process started here is killed on the way out.
"""
import argparse
import hashlib
import json
import os
import re
import shutil
import signal
import stat
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from local_user import other_user  # noqa: E402
from secjobs import SKIP, Deadline, Job, give_up  # noqa: E402
from ports import free_port  # noqa: E402

SCENARIOS = ["planted-scratch", "log-dir-others", "error-file-huge", "error-file-fifo",
             "token-other-owner", "token-fifo", "kill9-leftovers"]
# How many pids ahead the other user plants names for: the agent's pid must fall among them for
# the planted names to be the ones an old agent would have used (the test says whether it did).
PLANTED_PIDS = 2000
# The agent's peak RSS with a 1 GiB error file may exceed the same job's with no error file by
# this much: the old agent read the file whole (over 1 GiB). Relative, as an ASan+UBSan build's
# agent starts above 200 MiB by itself.
RSS_MARGIN_MIB = 100
# A job here: start, a failing worker, the summary.
JOB_LIMIT = 40

VALID_ERROR = ('{"message": {"message": "ValueError: boom from rank %s", "extraInfo": '
               '{"py_callstack": "Traceback: boom", "timestamp": "%s"}}}')


class Scenario:
    def __init__(self, args, deadline):
        self.args = args
        self.deadline = deadline
        # Traversable by the other user (it plants into a shared directory below), writable by root.
        self.work = tempfile.mkdtemp(prefix="ddprun-local-files-")
        os.chmod(self.work, 0o755)
        self.jobs = []

    def fail(self, why):
        give_up(why, self.jobs)

    def path(self, *parts):
        return os.path.join(self.work, *parts)

    def directory(self, name, mode, owner=None):
        path = self.path(name)
        os.mkdir(path)
        os.chmod(path, mode)  # after mkdir: the umask must not decide the mode under test
        if owner is not None:
            os.chown(path, owner[0], owner[1])
        return path

    def worker(self, name, body):
        """An executable sh worker script."""
        path = self.path(name)
        with open(path, "w") as out:
            out.write("#!/bin/sh\n" + body)
        os.chmod(path, 0o755)
        return path

    def agent(self, script, nproc=1, options=(), env=None, run_id=None):
        """A root ddprun agent of a one-node c10d job (a known run id) running `script`."""
        run_id = run_id or "files%d" % os.getpid()
        argv = [self.args.ddprun, "--nnodes", "1", "--nproc-per-node", str(nproc),
                "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:%d" % free_port(),
                "--rdzv-id", run_id, *options, "--no-python", script]
        environment = dict(os.environ, DDPRUN_HANG_DEBUGGER="")  # no gdb: the kernel's view suffices
        environment.update(env or {})
        job = Job(argv, name="ddprun agent", env=environment)
        self.jobs.append(job)
        return job

    def wait_rss(self, job, seconds, what):
        """Waits for `job` with wait4 (its exit code and its peak RSS in MiB, its reaped workers
        included); gives up if it runs past `seconds`."""
        end = time.monotonic() + self.deadline.cap(seconds)
        while True:
            pid, status, usage = os.wait4(job.pid, os.WNOHANG)
            if pid == job.pid:
                job.proc.returncode = os.waitstatus_to_exitcode(status)
                job.wait(5)  # its last output
                return job.proc.returncode, usage.ru_maxrss / 1024.0
            if time.monotonic() >= end:
                self.fail("%s: the agent still runs %.0f s after it started" % (what, seconds))
            time.sleep(0.05)

    def finished(self, job, seconds, what):
        code = job.wait(self.deadline.cap(seconds))
        if code is None:
            self.fail("%s: the agent still runs after %.0f s" % (what, seconds))
        return code

    def cleanup(self):
        for job in self.jobs:
            job.kill()
        shutil.rmtree(self.work, ignore_errors=True)


def snapshot(root):
    """Every name under `root` as lstat sees it: {path: what}, never following a link. A file's
    content is hashed, so a change of it shows whatever its times say."""
    seen = {}
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(directory, name)
            try:
                info = os.lstat(path)
            except FileNotFoundError:
                continue
            if stat.S_ISLNK(info.st_mode):
                what = ("link", info.st_uid, os.readlink(path))
            elif stat.S_ISDIR(info.st_mode):
                what = ("dir", info.st_uid, stat.S_IMODE(info.st_mode))
            elif stat.S_ISREG(info.st_mode):
                with open(path, "rb") as data:
                    digest = hashlib.sha256(data.read()).hexdigest()
                what = ("file", info.st_uid, stat.S_IMODE(info.st_mode), info.st_size, digest)
            else:
                what = ("other", info.st_uid, stat.S_IFMT(info.st_mode))
            seen[path] = what
    return seen


def error_code(path):
    """The "errorCode" of the error file at `path` (None: no such file, or not one)."""
    try:
        with open(path) as text:
            return json.load(text)["message"]["errorCode"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def summary_lines(text):
    return [line for line in text.splitlines() if line.strip()]


# --- planted-scratch ---

PLANTER = r"""
import os, sys
shared, run_id, parent, target, target_dir, first, count = sys.argv[1:8]
first, count = int(first), int(count)
planted = 0
for pid in range(first, first + count):
    # The old scratch directory, ddprun-<run id>-<pid>: every other pid a directory of mine, made
    # ready with links where the workers' error files would go; the others a link to root's
    # directory.
    scratch = os.path.join(shared, "ddprun-%s-%d" % (run_id, pid))
    if pid % 2 == 0:
        for rank in ("0", "1"):
            rank_dir = os.path.join(scratch, "attempt_0", rank)
            os.makedirs(rank_dir, exist_ok=True)
            os.symlink(target, os.path.join(rank_dir, "error.json"))
        for d in (scratch, os.path.join(scratch, "attempt_0"), os.path.join(scratch, "attempt_0", "0"),
                  os.path.join(scratch, "attempt_0", "1")):
            os.chmod(d, 0o777)
    else:
        os.symlink(target_dir, scratch)
    # The old temporary name of the parent's error file: <file>.ddprun-<pid>.tmp.
    os.symlink(target, "%s.ddprun-%d.tmp" % (parent, pid))
    planted += 1
print("planted %d pids from %d" % (planted, first), flush=True)
"""


def planted_scratch(s):
    user = other_user()
    shared = s.directory("shared", 0o1777)            # as /tmp: root's, sticky
    secret = s.directory("secret", 0o711)             # root's; the other user can only pass through
    target = s.path("secret", "target")
    with open(target, "w") as out:
        out.write("root only: must never change\n")
    os.chmod(target, 0o600)
    target_dir = s.directory(os.path.join("secret", "dir"), 0o700)
    parent = os.path.join(shared, "parent-error.json")
    run_id = "planted%d" % os.getpid()
    with open("/proc/sys/kernel/ns_last_pid") as last:
        first = int(last.read()) + 1
    # Rank 0 succeeds at once; rank 1 writes its error file and stays: hung at exit after 2 s, its
    # stacks saved, killed. The job fails with rank 1's error file, copied to the parent's.
    script = s.worker("worker.sh", """
if [ "$LOCAL_RANK" = 0 ]; then exit 0; fi
printf '%s' "$RANK" "$(date +%%s)" > "$TORCHELASTIC_ERROR_FILE"
echo "rank $RANK wrote $TORCHELASTIC_ERROR_FILE"
exec sleep 60
""" % VALID_ERROR)
    planter = s.path("planter.py")
    with open(planter, "w") as out:
        out.write(PLANTER)
    os.chmod(planter, 0o644)
    planted = user.run([sys.executable, planter, shared, run_id, parent, target, target_dir,
                        str(first), str(PLANTED_PIDS)], timeout=s.deadline.cap(60),
                       capture_output=True, text=True)
    if planted.returncode != 0:
        s.fail("the other user could not plant its names: %s" % planted.stderr.strip())
    print("%s: %s" % (user.name, planted.stdout.strip()))
    before = snapshot(s.work)

    job = s.agent(script, nproc=2, options=["--exit-timeout", "2"], run_id=run_id,
                  env={"TMPDIR": shared, "TORCHELASTIC_ERROR_FILE": parent})
    code = s.finished(job, JOB_LIMIT, "a root job among planted names")
    agent_pid = job.pid
    after = snapshot(s.work)

    # The job's own: its scratch directory (a fresh mkdtemp: not planted), and the parent's file.
    own = [p for p in after if p not in before and
           re.fullmatch(re.escape(os.path.join(shared, "ddprun-%d-" % agent_pid)) + r"[A-Za-z0-9]{6}", p)]
    if len(own) != 1:
        s.fail("cannot find the agent's scratch directory among the new names %s" %
               sorted(p for p in after if p not in before)[:20])
    scratch = own[0]
    changed = []
    for path in sorted(set(before) | set(after)):
        if path == parent or path == scratch or path.startswith(scratch + os.sep):
            continue
        if before.get(path) != after.get(path):
            changed.append("%s: %s -> %s" % (path, before.get(path), after.get(path)))
    with open(target) as text:
        target_text = text.read()
    if target_text != "root only: must never change\n":
        changed.insert(0, "%s now holds %r" % (target, target_text[:200]))
    if os.listdir(target_dir):
        changed.insert(0, "%s now holds %s" % (target_dir, os.listdir(target_dir)))
    if changed:
        s.fail("files outside the job's own directories changed:\n  " + "\n  ".join(changed[:30]))

    # The job did what it should, in its own directories.
    if code != 137:
        s.fail("the job should fail with 137 (rank 1 hung and killed), got %s" % code)
    info = os.lstat(parent)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != 0 or error_code(parent) != -9:
        s.fail("the parent's error file %s is not the agent's copy (errorCode -9): %s" % (parent, info))
    stacks = re.search(r"its threads' stacks are in (\S+)", job.errors)
    if not stacks or not stacks.group(1).startswith(scratch + os.sep) or not os.path.isfile(stacks.group(1)):
        s.fail("no stack dump in the job's scratch directory %s (saw %s)" %
               (scratch, stacks.group(1) if stacks else "none"))
    scratch_info = os.lstat(scratch)
    if scratch_info.st_uid != 0 or stat.S_IMODE(scratch_info.st_mode) != 0o700:
        s.fail("the scratch directory %s is not root's mode 0700: %o uid %d" %
               (scratch, stat.S_IMODE(scratch_info.st_mode), scratch_info.st_uid))
    in_range = first <= agent_pid < first + PLANTED_PIDS
    print("agent pid %d %s the planted range %d..%d" %
          (agent_pid, "inside" if in_range else "OUTSIDE", first, first + PLANTED_PIDS - 1))
    return ("%d names planted; exit 137, stacks in %s, parent error file written; nothing outside "
            "the job's directories changed%s" %
            (2 * PLANTED_PIDS, os.path.relpath(stacks.group(1), s.work),
             "" if in_range else " (the agent's pid was not among the planted ones)"))


# --- log-dir-others ---

def log_dir_others(s):
    user = other_user()
    script = s.worker("ok.sh", "echo worker ran\n")

    def refused(job, words, what, directory=None):
        code = s.finished(job, 20, what)
        lines = summary_lines(job.errors)
        text = lines[0].lower() if lines else ""
        if code != 2 or len(lines) != 1 or any(w.lower() not in text for w in words):
            s.fail("%s: exit %s with stderr %r, not exit 2 with one line naming %s" %
                   (what, code, job.errors[-2000:], words))
        if "worker ran" in job.output:
            s.fail("%s: a worker ran" % what)
        if directory and os.listdir(directory):
            s.fail("%s: the agent made %s in it" % (what, os.listdir(directory)))
        print("%s: exit 2: %s" % (what, lines[0]))

    # Every user can write into it (the other user shows it can), no sticky bit.
    open_dir = s.directory("open-logs", 0o777)
    probe = os.path.join(open_dir, "probe")
    if user.run(["touch", probe], timeout=10).returncode != 0:
        s.fail("the other user cannot write into %s: the case tests nothing" % open_dir)
    os.unlink(probe)
    refused(s.agent(script, options=["--log-dir", open_dir]), ["--log-dir", "writable by every user"],
            "a --log-dir every user can write into", open_dir)

    # The other user's own directory.
    theirs = s.directory("their-logs", 0o755, owner=(user.uid, user.gid))
    refused(s.agent(script, options=["--log-dir", theirs]), ["--log-dir", "owned by uid %d" % user.uid],
            "a --log-dir of %s" % user.name, theirs)

    # Below a directory every user can write into: theirs to rename away.
    below = os.path.join(open_dir, "mine")
    refused(s.agent(script, options=["--log-dir", below]), [open_dir + " is writable by every user"],
            "a --log-dir below one every user can write into")
    shutil.rmtree(below, ignore_errors=True)

    # A TMPDIR every user can write into, without the sticky bit.
    open_tmp = s.directory("open-tmp", 0o777)
    refused(s.agent(script, env={"TMPDIR": open_tmp}), ["temporary directory", "set tmpdir"],
            "a TMPDIR every user can write into", open_tmp)

    # Its group (the other user's) may write: one warning line, and the job runs.
    group = s.directory("group-logs", 0o770, owner=(0, user.gid))
    job = s.agent(script, options=["--log-dir", group])
    code = s.finished(job, JOB_LIMIT, "a group-writable --log-dir")
    warnings = [l for l in job.errors.splitlines() if "--log-dir" in l and "group" in l]
    if code != 0 or len(warnings) != 1:
        s.fail("a group-writable --log-dir: exit %s with %d warning lines, not 0 with one" %
               (code, len(warnings)))
    print("a --log-dir its group can write into: runs, one warning: %s" % warnings[0])
    # A sticky one (as /tmp) is fine: no word about it.
    sticky = s.directory("sticky-logs", 0o1777)
    job = s.agent(script, options=["--log-dir", sticky])
    code = s.finished(job, JOB_LIMIT, "a sticky --log-dir")
    if code != 0 or "--log-dir" in job.errors:
        s.fail("a sticky world-writable --log-dir: exit %s, stderr %r" % (code, job.errors[-1000:]))
    return "refused (exit 2, one line) x4, group-writable warned once, sticky accepted silently"


# --- error-file-huge ---

def error_file_huge(s):
    huge = s.path("huge.bin")
    with open(huge, "wb") as out:
        out.truncate(1 << 30)  # 1 GiB, sparse: costs no disk
    cases = [
        ("a 1 GiB sparse error file", 'truncate -s 1G "$TORCHELASTIC_ERROR_FILE"',
         "is larger than 4 MiB: not read"),
        ("a link to a 1 GiB sparse file", 'ln -s %s "$TORCHELASTIC_ERROR_FILE"' % huge,
         "is a symbolic link (not followed): not read"),
        ("a link to /", 'ln -s / "$TORCHELASTIC_ERROR_FILE"',
         "is a symbolic link (not followed): not read"),
    ]
    # The same failing job with no error file: the agent's own peak RSS, in this build.
    baseline = s.agent(s.worker("plain.sh", "exit 1\n"), env={"TORCHELASTIC_ERROR_FILE": s.path("plain.json")})
    _, base_rss = s.wait_rss(baseline, JOB_LIMIT, "a failing job with no error file")
    limit = base_rss + RSS_MARGIN_MIB
    results = ["no error file: %.0f MiB" % base_rss]
    for index, (what, command, said) in enumerate(cases):
        script = s.worker("huge%d.sh" % index, "%s\nexit 1\n" % command)
        parent = s.path("parent%d.json" % index)
        job = s.agent(script, env={"TORCHELASTIC_ERROR_FILE": parent})
        code, rss = s.wait_rss(job, JOB_LIMIT, what)
        print("%s: exit %s, agent peak RSS %.0f MiB" % (what, code, rss))
        if rss > limit:
            s.fail("%s: the agent's peak RSS was %.0f MiB (over %.0f MiB, %d more than with no "
                   "error file): it read the file" % (what, rss, limit, RSS_MARGIN_MIB))
        if code != 1 or said not in job.errors or "FAILED" not in job.errors:
            s.fail("%s: exit %s; the summary should say %r" % (what, code, said))
        if error_code(parent) != 1:
            s.fail("%s: the parent's error file was not written" % what)
        line = next(l for l in job.errors.splitlines() if said in l)
        results.append("%s: %.0f MiB, %r" % (what, rss, line.strip()))
    return "; ".join(results)


# --- error-file-fifo ---

def error_file_fifo(s):
    parent = s.path("parent.json")
    # Rank 0 fails with a good error file; when the agent stops rank 1 (after reading rank 0's
    # file), rank 1 swaps rank 0's for a FIFO: the agent reads that one again for the parent's copy.
    script = s.worker("fifo-swap.sh", """
if [ "$LOCAL_RANK" = 0 ]; then
  printf '%s' "$RANK" "$(date +%%s)" > "$TORCHELASTIC_ERROR_FILE"
  sleep 0.5
  exit 1
fi
rank0="$(dirname "$(dirname "$TORCHELASTIC_ERROR_FILE")")/0/error.json"
swap() {
  mkfifo "$rank0.fifo" && mv -f "$rank0.fifo" "$rank0" && echo "rank 1 swapped $rank0 for a FIFO"
  exit 1
}
trap swap TERM
sleep 60 &
wait $!
""" % VALID_ERROR)
    job = s.agent(script, nproc=2, env={"TORCHELASTIC_ERROR_FILE": parent})
    started = time.monotonic()
    code = s.finished(job, JOB_LIMIT, "the root cause's error file swapped for a FIFO")
    took = time.monotonic() - started
    if "swapped" not in job.output:
        s.fail("rank 1 did not swap rank 0's error file: the case tests nothing")
    if code != 1 or "Root Cause" not in job.errors or "Traceback: boom" not in job.errors:
        s.fail("the job should end with exit 1 and a summary with rank 0's traceback (exit %s)" % code)
    written = open(parent).read() if os.path.isfile(parent) else ""
    if error_code(parent) != 1 or "boom from rank 0" not in written:
        s.fail("the parent's error file is not rank 0's error: %r" % written[:300])
    os.unlink(parent)

    # A worker that fails leaving a FIFO as its error file: the summary says so.
    alone = s.worker("fifo-alone.sh", 'mkfifo "$TORCHELASTIC_ERROR_FILE"\nexit 1\n')
    job = s.agent(alone, env={"TORCHELASTIC_ERROR_FILE": parent})
    started = time.monotonic()
    code = s.finished(job, JOB_LIMIT, "a FIFO as the error file")
    alone_took = time.monotonic() - started
    said = "is a FIFO, not a regular file: not read"
    if code != 1 or "Root Cause" not in job.errors or said not in job.errors:
        s.fail("a FIFO as the error file: exit %s; the summary should say %r" % (code, said))
    if error_code(parent) != 1:
        s.fail("a FIFO as the error file: the parent's error file was not written")
    return ("the root cause's error file swapped for a FIFO: exit 1 after %.1f s, the parent's "
            "error file holds rank 0's error; a FIFO error file: exit 1 after %.1f s, the summary "
            "says so" % (took, alone_took))


# --- the token files (the scenarios live in token_test.py, with its other token checks) ---

def token_scenario(name):
    def run(s):
        import token_test
        s.args.python = s.args.python or "/usr/bin/python3"
        scenario = token_test.Scenario(s.args, s.deadline)
        try:
            return {"token-other-owner": token_test.other_owner,
                    "token-fifo": token_test.token_fifo}[name](scenario)
        finally:
            scenario.cleanup()
    return run


# --- kill9-leftovers ---

def kill9_leftovers(s):
    tmp = s.directory("tmp", 0o700)
    script = s.worker("stay.sh", """
echo "rank $RANK pid $$ scratch $TORCHELASTIC_ERROR_FILE private $DDPRUN_HEARTBEAT_FILE"
exec sleep 60
""")
    job = s.agent(script, nproc=2, env={"TMPDIR": tmp})
    pattern = r"rank (\d+) pid (\d+) scratch (\S+) private (\S+)"
    end = time.monotonic() + s.deadline.cap(30)
    while len(re.findall(pattern, job.output)) < 2:
        if time.monotonic() >= end or job.returncode is not None:
            s.fail("the workers did not start")
        time.sleep(0.05)
    found = re.findall(pattern, job.output)
    pids = [int(pid) for _, pid, _, _ in found]
    made = sorted(os.listdir(tmp))
    print("the agent's directories in TMPDIR: %s; workers %s" % (made, pids))
    if len(made) != 2:
        s.fail("expected the scratch and private directories in TMPDIR, saw %s" % made)
    os.kill(job.pid, signal.SIGKILL)
    job.wait(5)
    end = time.monotonic() + s.deadline.cap(10)
    started = time.monotonic()
    while True:
        left = sorted(os.listdir(tmp))
        alive = [pid for pid in pids if os.path.exists("/proc/%d" % pid) and
                 open("/proc/%d/stat" % pid).read().split()[2] != "Z"]
        if not left and not alive:
            break
        if time.monotonic() >= end:
            s.fail("10 s after kill -9 of the agent: left in TMPDIR %s, workers still alive %s" % (left, alive))
        time.sleep(0.05)
    return "both directories (%s) and both workers gone %.2f s after kill -9" % (", ".join(made), time.monotonic() - started)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ddprun", required=True)
    parser.add_argument("--rendezvous", required=True, help="the ddprun-rendezvous binary")
    parser.add_argument("--python", default="/usr/bin/python3", help="runs token_test's no-op worker")
    parser.add_argument("--scenario", required=True, choices=SCENARIOS)
    # Half of CTest's TIMEOUT: a hang is reported with what was seen, not killed without a word.
    parser.add_argument("--timeout", type=float, default=150)
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("SKIP: the agent under test runs as root, against another user", flush=True)
        return SKIP
    deadline = Deadline(args.timeout)
    handler = {"planted-scratch": planted_scratch, "log-dir-others": log_dir_others,
               "error-file-huge": error_file_huge, "error-file-fifo": error_file_fifo,
               "token-other-owner": token_scenario("token-other-owner"),
               "token-fifo": token_scenario("token-fifo"), "kill9-leftovers": kill9_leftovers}
    scenario = Scenario(args, deadline)
    started = time.monotonic()
    try:
        verdict = handler[args.scenario](scenario)
    finally:
        scenario.cleanup()
    print("RESULT %s: %s (%.1f s)" % (args.scenario, verdict, time.monotonic() - started))
    return 0


if __name__ == "__main__":
    sys.exit(main())
