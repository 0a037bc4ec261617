#!/usr/bin/env python3
"""Scripts nobody here wrote (issue #36, point 5): PyTorch's own examples meant for torchrun, run
under ddprun and under the torchrun of the same torch, side by side, on CPU with gloo.

    upstream_scripts_test.py --ddprun BIN --python PY --scenario NAME

PY is /usr/bin/python3 (torch 1.13: Debian's torchrun through shared/tools/torchrun-py311.py) or
scripts/torch2-python (torch 2.6 in a chroot, `python -m torch.distributed.run` there; exit 77 =
skipped when the chroot is missing). The upstream files are kept byte for byte under
tests/upstream/ (README.md there: repository, commit, licence); each run copies them into a scratch
directory and applies tests/upstream/<repo>.cpu.patch (cuda -> cpu, nccl -> gloo, ...).

  tutorial   ddp-tutorial-series/multigpu_torchrun.py 3 1, 2 workers: the same lines, exit 0
  resume     the same with --max_restarts 1, 6 epochs: rank 1 is killed (SIGKILL) after the first
             snapshot; the group restarts and every rank prints "Resuming training from snapshot
             at Epoch N" (the same N on both), then finishes; exit 0. A torchrun 2.x whose
             restart fails or hangs (gloo's mesh, seen in 1 of 2 runs; a restart with no
             "Resuming" line 120 s after the kill is stopped) is shown, and ddprun alone is held
             to the bar then
  multinode  ddp-tutorial-series/multinode.py 3 1 as the tutorial starts it: two agents (nodes)
             of one worker each, c10d, --node_rank 0 and 1: the same lines, exit 0
  ddp        distributed/ddp/example.py as its run_example.sh starts it (static rendezvous at
             localhost): the same lines (the environment it prints included), exit 0
  record     tests/launcher/workers/record_worker.py: @record main raising on rank 1: the same
             error summary (root cause's rank, local rank, exit code, an error file, the
             traceback from it, no other failures) and ddprun exits with the root cause's code (1,
             as torchrun)
  dcp        tests/launcher/workers/dcp_worker.py (torch 2.x): DDP, 3 steps, dcp.save; started
             again, dcp.load: every rank resumes the weights it saved. torch 2.6 sometimes leaves
             rank 0 behind after its last line, under either launcher: such a run is stopped 30 s
             after every rank's last line and reported

Lines are compared as multisets of the script's own records (regexes per script) found in each
launcher's stdout with ddprun's `[defaultN]:` prefixes removed: torchrun's workers share its
stdout, so two ranks' lines can be glued into one there. Every run is bounded and prints what it
saw when it fails.
"""
import argparse
import collections
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
UPSTREAM = os.path.join(REPO, "tests", "upstream")
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from jobs import SKIP, Deadline, Job, describe, give_up, torch_version  # noqa: E402
from ports import free_port  # noqa: E402
from side_by_side import TORCHRUN  # noqa: E402

EXAMPLES = "pytorch-examples"
TUTORIAL = "distributed/ddp-tutorial-series"
RECORD_WORKER = os.path.join(HERE, "workers", "record_worker.py")
PREFIX = re.compile(r"^\[default\d+\]:", re.M)

# The records each script prints, as regexes over its output; a pid is shown as [PID].
TUTORIAL_RECORDS = [r"\[GPU\d+\] Epoch \d+ \| Batchsize: \d+ \| Steps: \d+",
                    r"Epoch \d+ \| Training snapshot saved at \S+",
                    r"Loading snapshot",
                    r"Resuming training from snapshot at Epoch \d+"]
DDP_RECORDS = [r"\[\d+\] rank = \d+, world_size = \d+",
               r"\[\d+\] Initializing process group with: \{[^}]*\}",
               r"\[\d+\]: world_size = \d+, rank = \d+, backend=\w+",
               r"training completed in rank \d+!",
               r"Unable to locate sufficient \d+ gpus to run this example\. Exiting\."]
RECORD_RECORDS = [r"rank \d+ of \d+ ready", r"rank \d+ still here"]


class Flavour:
    """One torch: its python, its torchrun, its version."""

    def __init__(self, python, version):
        self.python = python
        self.version = version
        if os.path.basename(python) == "torch2-python":
            self.torchrun = [python, "-m", "torch.distributed.run"]
        else:
            self.torchrun = [python, TORCHRUN]


def launcher_argv(launcher, args, flavour):
    return [args.ddprun] if launcher == "ddprun" else list(flavour.torchrun)


def launch(launcher, options, script_argv, args, flavour, cwd, name):
    """One launcher (one node) started in `cwd`: `options` are torchrun's, the same for both."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("PYTHON_EXEC", None)
    if launcher == "ddprun":
        env["PYTHON_EXEC"] = flavour.python  # torchrun runs its workers with its own python
    argv = launcher_argv(launcher, args, flavour) + options + script_argv
    return Job(argv, name=f"{launcher} {name}", env=env, cwd=cwd)


def finish(jobs, deadline, what):
    for job in jobs:
        if job.wait(deadline.left()) is None:
            give_up(f"{what}: not finished within the test's deadline", jobs)


def records(text, patterns):
    """The script's records in a launcher's stdout, pids replaced, as a multiset."""
    text = PREFIX.sub("", text)
    found = re.findall("|".join(f"(?:{p})" for p in patterns), text)
    return collections.Counter(re.sub(r"\[\d+\]", "[PID]", r) for r in found)


def shown(counter):
    return "\n".join(f"  {n} x {line}" for line, n in sorted(counter.items()))


def fail(message, jobs=()):
    print(f"FAIL: {message}", flush=True)
    if jobs:
        print(describe(jobs), end="", flush=True)
    sys.exit(1)


def pristine_copy(work, repo_dir, patch_name):
    """tests/upstream/<repo_dir> copied under `work` and patched for the CPU; the copy's root."""
    root = os.path.join(work, repo_dir)
    shutil.copytree(os.path.join(UPSTREAM, repo_dir), root)
    patch = os.path.join(UPSTREAM, patch_name)
    done = subprocess.run(["patch", "-p1", "--forward", "--batch", "-d", root, "-i", patch],
                          capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        fail(f"{patch_name} does not apply to tests/upstream/{repo_dir}:\n{done.stdout}{done.stderr}")
    return root


def descendants(root_pid):
    """Every process below `root_pid` (by parent), read from /proc."""
    children = collections.defaultdict(list)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rfind(")") + 2:].split()[1])
        children[ppid].append(int(entry))
    found, todo = [], [root_pid]
    while todo:
        pid = todo.pop()
        for child in children.get(pid, ()):
            found.append(child)
            todo.append(child)
    return found


def environ(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            pairs = f.read().split(b"\0")
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return {}, ""
    env = dict(p.decode(errors="replace").split("=", 1) for p in pairs if b"=" in p)
    return env, cmdline


def worker_pid(job, rank, script):
    """The pid of the first attempt's worker of `rank` running `script` under `job`, or None."""
    for pid in descendants(job.pid):
        env, cmdline = environ(pid)
        if env.get("RANK") == str(rank) and env.get("TORCHELASTIC_RESTART_COUNT") == "0" \
                and script in cmdline and "python" in cmdline:
            return pid
    return None


def same_records(results, patterns, what):
    """Every launcher's records equal; returns them."""
    seen = {launcher: records(job.output, patterns) for launcher, job in results.items()}
    (first, a), (second, b) = seen.items()
    if a != b:
        fail(f"{what}: {first} and {second} printed different lines\n--- {first}\n{shown(a)}\n"
             f"--- {second}\n{shown(b)}", list(results.values()))
    return a


def exit_codes(jobs_by_launcher, expected, what):
    for launcher, jobs in jobs_by_launcher.items():
        codes = [j.returncode for j in jobs]
        if any(c != expected for c in codes):
            fail(f"{what}: {launcher} exited {codes}, expected {expected}", jobs)


def each_launcher(body):
    """Runs body(launcher) for ddprun, then torchrun; a dict of what each returned."""
    return {launcher: body(launcher) for launcher in ("ddprun", "torchrun")}


def tutorial(args, flavour, work, deadline):
    def body(launcher):
        root = pristine_copy(os.path.join(work, launcher), EXAMPLES, f"{EXAMPLES}.cpu.patch")
        cwd = os.path.join(root, TUTORIAL)
        options = ["--nnodes", "1", "--nproc_per_node", "2", "--rdzv_backend", "c10d",
                   "--rdzv_endpoint", f"127.0.0.1:{free_port()}"]
        job = launch(launcher, options, ["multigpu_torchrun.py", "3", "1"], args, flavour, cwd,
                     "tutorial")
        finish([job], deadline, f"{launcher}: multigpu_torchrun.py")
        return job
    jobs = each_launcher(body)
    exit_codes({k: [v] for k, v in jobs.items()}, 0, "multigpu_torchrun.py 3 1")
    lines = same_records(jobs, TUTORIAL_RECORDS, "multigpu_torchrun.py 3 1")
    want = {f"[GPU{r}] Epoch {e} | Batchsize: 32 | Steps: 32" for r in (0, 1) for e in range(3)}
    if not want <= set(lines) or lines["Epoch 2 | Training snapshot saved at snapshot.pt"] != 1:
        fail(f"multigpu_torchrun.py 3 1: not every epoch of every rank ran:\n{shown(lines)}",
             list(jobs.values()))
    print(f"torch {flavour.version}: multigpu_torchrun.py 3 1: {sum(lines.values())} lines, the same "
          "under both launchers; exit 0")


def resume(args, flavour, work, deadline):
    epochs = 6

    def body(launcher):
        root = pristine_copy(os.path.join(work, launcher), EXAMPLES, f"{EXAMPLES}.cpu.patch")
        cwd = os.path.join(root, TUTORIAL)
        options = ["--nnodes", "1", "--nproc_per_node", "2", "--max_restarts", "1",
                   "--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{free_port()}"]
        job = launch(launcher, options, ["multigpu_torchrun.py", str(epochs), "1"], args, flavour,
                     cwd, "resume")
        saved = re.compile(r"Epoch \d+ \| Training snapshot saved at")
        wait = Deadline(min(deadline.left(), 180))
        while not saved.search(job.output):
            if job.returncode is not None or not wait.left():
                give_up(f"{launcher}: no snapshot saved (the kill waits for one)", [job])
            time.sleep(0.05)
        victim = worker_pid(job, 1, "multigpu_torchrun.py")
        if victim is None:
            give_up(f"{launcher}: no worker of rank 1 found below pid {job.pid}", [job])
        os.kill(victim, signal.SIGKILL)
        if launcher == "torchrun" and not flavour.version.startswith("1."):
            stop_unresumed(job, deadline)
        finish([job], deadline, f"{launcher}: multigpu_torchrun.py after rank 1 was killed")
        return job
    jobs = each_launcher(body)
    summary = []
    # torchrun 2.6's restarted workers sometimes fail to connect gloo's mesh (docs/env_contract.md,
    # "Scripts nobody here wrote"): its failure is shown, ddprun is held to the bar alone then.
    if jobs["torchrun"].returncode != 0 and not flavour.version.startswith("1."):
        print(f"torchrun exited {jobs['torchrun'].returncode} after rank 1 was killed (the "
              f"restart failed):\n{describe([jobs['torchrun']])}", flush=True)
        summary.append(f"torchrun: exit {jobs['torchrun'].returncode}, its restart failed")
        del jobs["torchrun"]
    exit_codes({k: [v] for k, v in jobs.items()}, 0, "multigpu_torchrun.py, rank 1 killed")
    for launcher, job in jobs.items():
        lines = records(job.output, TUTORIAL_RECORDS)
        resumed = [line for line in lines if line.startswith("Resuming")]
        last = {f"[GPU{r}] Epoch {epochs - 1} | Batchsize: 32 | Steps: 32" for r in (0, 1)}
        if len(resumed) != 1 or lines[resumed[0]] != 2 or lines["Loading snapshot"] != 2 \
                or not last <= set(lines):
            fail(f"{launcher}: after rank 1 was killed, not both ranks resumed from one snapshot "
                 f"and finished:\n{shown(lines)}", [job])
        summary.append(f"{launcher}: {resumed[0]} on both ranks, exit 0")
    print(f"torch {flavour.version}: rank 1 killed after a snapshot, the group restarted; "
          + "; ".join(summary))


def stop_unresumed(job, deadline, grace=120):
    """torchrun 2.6's restarted workers sometimes hang in gloo's mesh instead of failing: a restart
    that printed no "Resuming" line `grace` s after the kill is stopped, and shown as failed."""
    wait = Deadline(min(grace, deadline.left()))
    while "Resuming" not in job.output and job.wait(min(1.0, wait.left())) is None:
        if not wait.left():
            print(f"torchrun (pid {job.pid}): no rank resumed {grace} s after the kill; stopped:\n"
                  f"{describe([job])}", flush=True)
            workers = descendants(job.pid)
            job.kill()
            for pid in workers:  # a worker torchrun did not stop in its grace
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            return


def multinode(args, flavour, work, deadline):
    def body(launcher):
        root = pristine_copy(os.path.join(work, launcher), EXAMPLES, f"{EXAMPLES}.cpu.patch")
        cwd = os.path.join(root, TUTORIAL)
        endpoint = f"127.0.0.1:{free_port()}"
        nodes = [launch(launcher, ["--nproc_per_node=1", "--nnodes=2", f"--node_rank={node}",
                                   "--rdzv_id=456", "--rdzv_backend=c10d",
                                   f"--rdzv_endpoint={endpoint}"],
                        ["multinode.py", "3", "1"], args, flavour, cwd, f"node {node}")
                 for node in (0, 1)]
        finish(nodes, deadline, f"{launcher}: multinode.py on two nodes")
        return nodes
    nodes = each_launcher(body)
    exit_codes(nodes, 0, "multinode.py 3 1 on two nodes")
    joined = {launcher: JoinedJobs(jobs) for launcher, jobs in nodes.items()}
    lines = same_records(joined, TUTORIAL_RECORDS, "multinode.py 3 1")
    want = {f"[GPU{r}] Epoch {e} | Batchsize: 32 | Steps: 32" for r in (0, 1) for e in range(3)}
    if not want <= set(lines):
        fail(f"multinode.py: not every epoch of every global rank ran:\n{shown(lines)}",
             [j for jobs in nodes.values() for j in jobs])
    print(f"torch {flavour.version}: multinode.py 3 1 on two nodes: {sum(lines.values())} lines, "
          "the same under both launchers; exit 0 on both nodes")


class JoinedJobs:
    """The stdout of several nodes' launchers as one (for same_records)."""

    def __init__(self, jobs):
        self.jobs = jobs
        self.output = "".join(j.output for j in jobs)
        self.pid = jobs[0].pid

    def describe(self):
        return "".join(j.describe() for j in self.jobs)


def ddp(args, flavour, work, deadline):
    def body(launcher):
        root = pristine_copy(os.path.join(work, launcher), EXAMPLES, f"{EXAMPLES}.cpu.patch")
        cwd = os.path.join(root, "distributed", "ddp")
        # run_example.sh's command line, on a free port instead of its 5972.
        options = ["--nnodes=1", "--nproc_per_node=2", "--rdzv_id=101",
                   f"--rdzv_endpoint=localhost:{free_port()}"]
        job = launch(launcher, options, ["example.py"], args, flavour, cwd, "ddp example")
        finish([job], deadline, f"{launcher}: distributed/ddp/example.py")
        return job
    jobs = each_launcher(body)
    exit_codes({k: [v] for k, v in jobs.items()}, 0, "distributed/ddp/example.py")
    # MASTER_PORT is each run's own free port: shown as PORT.
    lines = {launcher: collections.Counter(
        re.sub(r"'MASTER_PORT': '\d+'", "'MASTER_PORT': 'PORT'", line)
        for line in records(job.output, DDP_RECORDS).elements()) for launcher, job in jobs.items()}
    if lines["ddprun"] != lines["torchrun"]:
        fail("distributed/ddp/example.py: the launchers' lines differ\n--- ddprun\n"
             f"{shown(lines['ddprun'])}\n--- torchrun\n{shown(lines['torchrun'])}",
             list(jobs.values()))
    if lines["ddprun"]["training completed in rank 1!"] != 1:
        fail(f"distributed/ddp/example.py did not train on both ranks:\n{shown(lines['ddprun'])}",
             list(jobs.values()))
    print(f"torch {flavour.version}: distributed/ddp/example.py: {sum(lines['ddprun'].values())} "
          "lines, the same under both launchers (the environment printed included); exit 0")


SUMMARY_FIELD = re.compile(r"^  (time|host|rank|exitcode|error_file|traceback)\s*: ?(.*)$")


def failure_summary(stderr):
    """torchrun's summary in a launcher's stderr: {'title', 'failures', 'root': {field: value},
    'traceback': [lines]}, or None."""
    text = PREFIX.sub("", stderr)
    match = re.search(r"^=+\n(.*? FAILED)\n-+\nFailures:\n(.*?)-+\nRoot Cause \(first observed "
                      r"failure\):\n(.*?)^=+$", text, re.M | re.S)
    if not match:
        return None
    root, traceback, in_traceback = {}, [], False
    for line in match.group(3).splitlines():
        field = SUMMARY_FIELD.match(line)
        if field and not in_traceback:
            root[field.group(1)] = field.group(2)
            in_traceback = field.group(1) == "traceback"
            if in_traceback:
                traceback.append(field.group(2))
        elif in_traceback:
            traceback.append(line.strip())
    return {"title": match.group(1), "failures": match.group(2).strip(), "root": root,
            "traceback": [t for t in traceback if t]}


def record(args, flavour, work, deadline):
    def body(launcher):
        cwd = os.path.join(work, launcher)
        os.makedirs(cwd)
        options = ["--nnodes", "1", "--nproc_per_node", "2", "--rdzv_backend", "c10d",
                   "--rdzv_endpoint", f"127.0.0.1:{free_port()}"]
        job = launch(launcher, options, [RECORD_WORKER], args, flavour, cwd, "record")
        finish([job], deadline, f"{launcher}: record_worker.py")
        return job
    jobs = each_launcher(body)
    exit_codes({k: [v] for k, v in jobs.items()}, 1, "record_worker.py (rank 1 raises)")
    same_records(jobs, RECORD_RECORDS, "record_worker.py")
    summaries = {}
    for launcher, job in jobs.items():
        summary = failure_summary(job.errors)
        if summary is None:
            fail(f"{launcher} printed no failure summary", [job])
        root = summary["root"]
        checks = [(root.get("rank") == "1 (local_rank: 1)", "the root cause is rank 1"),
                  (re.fullmatch(r"1 \(pid: \d+\)", root.get("exitcode", "")), "exit code 1"),
                  (root.get("error_file", "<N/A>") != "<N/A>", "an error file"),
                  (summary["failures"] == "<NO_OTHER_FAILURES>", "no other failures"),
                  (summary["traceback"][-1:] == ["ValueError: shard 1 is corrupt: checksum mismatch"],
                   "the traceback ends with the worker's exception")]
        for ok, what in checks:
            if not ok:
                fail(f"{launcher}'s summary lacks {what}: {summary}", [job])
        summaries[launcher] = summary
    if summaries["ddprun"]["traceback"] != summaries["torchrun"]["traceback"] or \
            summaries["ddprun"]["title"] != summaries["torchrun"]["title"]:
        fail(f"the summaries' title or traceback differ:\n--- ddprun\n{summaries['ddprun']}\n"
             f"--- torchrun\n{summaries['torchrun']}", list(jobs.values()))
    print(f"torch {flavour.version}: record_worker.py: the same summary under both launchers (root "
          f"cause rank 1, exit code 1, error file, {len(summaries['ddprun']['traceback'])}-line "
          "traceback, no other failures); both exit 1")


DCP_WORKER = os.path.join(HERE, "workers", "dcp_worker.py")
DCP_RECORDS = [r"rank \d+: saved step \d+, weights -?[0-9.]+",
               r"rank \d+: resumed at step \d+, weights -?[0-9.]+"]


def dcp(args, flavour, work, deadline):
    def body(launcher):
        cwd = os.path.join(work, launcher)
        os.makedirs(cwd)
        runs = []
        for attempt in ("save", "resume"):
            options = ["--nnodes", "1", "--nproc_per_node", "2", "--rdzv_backend", "c10d",
                       "--rdzv_endpoint", f"127.0.0.1:{free_port()}"]
            job = launch(launcher, options, [DCP_WORKER, os.path.join(cwd, "checkpoint"), "3"], args,
                         flavour, cwd, f"dcp {attempt}")
            finish_or_hung(launcher, job, r"rank \d+: (saved|resumed)", 2, deadline, hung)
            runs.append(job)
        return JoinedJobs(runs)
    hung = []
    jobs = each_launcher(body)
    exit_codes({k: [j for j in v.jobs if j not in hung] for k, v in jobs.items()}, 0,
               "dcp_worker.py, save then resume")
    lines = same_records(jobs, DCP_RECORDS, "dcp_worker.py, save then resume")
    saved = {line.split("weights ")[1] for line in lines if "saved step 3" in line}
    resumed = {line.split("weights ")[1] for line in lines if "resumed at step 3" in line}
    if sum(lines.values()) != 4 or len(saved) != 1 or saved != resumed:
        fail(f"dcp_worker.py: not both ranks saved and resumed the same weights:\n{shown(lines)}",
             [j for v in jobs.values() for j in v.jobs])
    print(f"torch {flavour.version}: dcp_worker.py: both ranks saved step 3 with DCP and resumed it "
          f"(weights {saved.pop()}) under both launchers; exit 0"
          + (f" ({len(hung)} of 4 runs hung at a worker's exit, stopped: "
             f"{', '.join(j.name for j in hung)})" if hung else ""))


def finish_or_hung(launcher, job, done_line, ranks, deadline, hung, grace=30):
    """torch 2.6 sometimes leaves rank 0 of dcp_worker.py hanging after its last line, under
    either launcher (docs/env_contract.md, "Scripts nobody here wrote"): a run whose every rank
    printed `done_line` and which has not ended `grace` s later is stopped and put on `hung`."""
    while job.wait(min(1.0, deadline.left())) is None:
        if not deadline.left():
            give_up(f"{launcher}: dcp_worker.py did not finish within the test's deadline", [job])
        if len(re.findall(done_line, job.output)) >= ranks:
            if job.wait(min(grace, deadline.left())) is None:
                print(f"{launcher} (pid {job.pid}): every rank done, but not exited {grace} s "
                      f"later; stopped:\n{describe([job])}", flush=True)
                job.kill()
                hung.append(job)
            return


SCENARIOS = {"tutorial": tutorial, "resume": resume, "multinode": multinode, "ddp": ddp,
             "record": record, "dcp": dcp}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ddprun", required=True)
    parser.add_argument("--python", required=True)
    parser.add_argument("--scenario", required=True, choices=sorted(SCENARIOS))
    # Well below CTest's TIMEOUT (480 s), so that a hang is reported with what was seen.
    parser.add_argument("--timeout", type=float, default=300)
    args = parser.parse_args()
    args.ddprun = os.path.abspath(args.ddprun)  # the launchers run in scratch directories
    if os.sep in args.python:
        args.python = os.path.abspath(args.python)
    deadline = Deadline(args.timeout)
    version = torch_version(args.python, deadline.cap(90))
    if version is None:
        return SKIP
    work = tempfile.mkdtemp(prefix="ddprun-upstream-")
    try:
        SCENARIOS[args.scenario](args, Flavour(args.python, version), work, deadline)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"PASS: {args.scenario}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
