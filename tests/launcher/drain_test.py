#!/usr/bin/env python3
"""A graceful drain keeps the emergency checkpoint (issue 37, points 4 and 6): SIGTERM to the
launcher while two ranks train from a DataLoader with two worker processes each
(workers/drain_worker.py, gloo on CPU), and each rank saves its checkpoint at the next step
boundary and exits 0.

    drain_test.py --ddprun BIN --scenario ddprun|wrapper|side-by-side [--runs N]

ddprun        the usual recipe (a SIGTERM handler sets a flag) under ddprun, 10 runs: every run
              keeps both checkpoints (they load, at the step the rank said), ddprun exits 143, and
              no process of the job is left (no orphan DataLoader worker).
wrapper       no signal handler at all: the rank's leader is a shell that runs the trainer without
              exec and dies of the SIGTERM; the trainer reads $DDPRUN_STOP_FILE at its step boundary
              and still saves (2 runs).
side-by-side  torchrun 1.13 (3 runs), torchrun 2.6 (3 runs, through scripts/torch2-python; skipped
              when its chroot is missing) and ddprun (3 runs) with the signal recipe: how many runs
              kept both checkpoints, printed (docs/env_contract.md, "Stopping gracefully"), not
              asserted: it is the anchors' behaviour.

Every wait is bounded by one deadline and prints what it saw (the launcher's output, the process
tree) when it gives up.
"""
import argparse
import os
import re
import shutil
import signal
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "workers", "drain_worker.py")
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
TORCH2_PYTHON = os.path.join(REPO, "scripts", "torch2-python")
TORCH113_PYTHON = "/usr/bin/python3"
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from jobs import SKIP, Deadline, Job, give_up, torch_version  # noqa: E402
from side_by_side import TORCHRUN, torchrun_command  # noqa: E402

READY = re.compile(r"rank (\d): in the loop pid (\d+)")
SAVED = re.compile(r"rank (\d): checkpoint saved at step (\d+)")


def job_processes(marker):
    """Pids of processes whose command line holds `marker` (a run's own directory: every rank and
    every DataLoader worker it forked has it in its argv)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                if marker.encode() in cmdline.read():
                    found.append(int(entry))
        except OSError:
            pass
    return found


def wait_for(condition, seconds, deadline):
    """Whether `condition()` held within `seconds` (polled)."""
    end = time.monotonic() + deadline.cap(seconds)
    while not condition():
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


def run_once(name, argv, env, run_dir, deadline, strict):
    """One job: wait for both ranks in the loop, SIGTERM the launcher, wait for its end. Returns
    (exit code, {rank: step saved}, checkpoint problems, pids left, the job). A job that does not
    get there in time fails the test with what was seen (`strict`), or is killed and reported."""
    job = Job(argv, name=name, env=env)

    def stuck(why):
        if strict:
            give_up(f"{name}: {why}", [job])
        job.kill()
        return None, {}, [why], job_processes(run_dir), job

    # Searched in the whole output: torchrun 1.13's ranks write into one stream, a line of one
    # rank may end in the middle of another's.
    if not wait_for(lambda: len(set(READY.findall(job.output))) == 2 or job.returncode is not None,
                    90, deadline) or job.returncode is not None:
        return stuck(f"{len(set(READY.findall(job.output)))} of 2 ranks in the training loop")
    job.signal(signal.SIGTERM)
    if job.wait(deadline.cap(60)) is None:
        return stuck("still running 60 s after SIGTERM")
    saved = {int(m.group(1)): int(m.group(2)) for m in SAVED.finditer(job.output)}
    problems = []
    import torch  # the driver's own (torch 1.13), imported once a checkpoint is to be read
    for rank in (0, 1):
        path = os.path.join(run_dir, f"ckpt-{rank}.pt")
        if not os.path.exists(path):
            problems.append(f"rank {rank}: no checkpoint")
            continue
        try:
            state = torch.load(path)
        except Exception as error:  # noqa: BLE001 (what it was is the message)
            problems.append(f"rank {rank}: its checkpoint does not load: {error}")
            continue
        if state.get("step") != saved.get(rank):
            problems.append(f"rank {rank}: checkpoint at step {state.get('step')}, said "
                            f"{saved.get(rank)}")
    # The launcher is gone; what it killed may still be on its way out for a moment.
    settle = time.monotonic() + min(5, deadline.left())
    left = job_processes(run_dir)
    while left and time.monotonic() < settle:
        time.sleep(0.05)
        left = job_processes(run_dir)
    return job.returncode, saved, problems, left, job


def launcher_argv(launcher, ddprun, python, run_dir, notice):
    script = [WORKER, run_dir, "--notice", notice]
    if launcher == "ddprun":
        return [ddprun, "--standalone", "--nproc-per-node", "2", *script]
    if launcher == "wrapper":
        # `; echo`: the shell waits for the trainer instead of becoming it (no exec).
        command = " ".join([python, "-u", *script]) + "; echo wrapper done"
        return [ddprun, "--standalone", "--nproc-per-node", "2", "--no-python", "bash", "-c",
                command]
    if launcher == "torchrun 1.13":
        return torchrun_command(TORCH113_PYTHON, "--nproc_per_node", "2", *script)
    return [TORCH2_PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
            *script]


def series(launcher, runs, args, work, deadline, strict):
    """`runs` jobs under `launcher`; with `strict`, the first run that loses a checkpoint or leaves
    a process fails the test. Returns how many kept both checkpoints, and the exit codes."""
    python = TORCH2_PYTHON if launcher == "torchrun 2.6" else TORCH113_PYTHON
    notice = "file" if launcher == "wrapper" else "signal"
    kept, codes = 0, []
    for run in range(runs):
        run_dir = tempfile.mkdtemp(prefix=f"run{run}-", dir=work)
        env = dict(os.environ)
        if launcher == "ddprun":
            env["PYTHON_EXEC"] = python  # torchrun runs its workers with its own interpreter
        started = time.monotonic()
        code, saved, problems, left, job = run_once(
            f"{launcher} run {run + 1}", launcher_argv(launcher, args.ddprun, python, run_dir, notice),
            env, run_dir, deadline, strict)
        codes.append(code)
        ok = not problems and sorted(saved) == [0, 1]
        kept += ok
        print(f"{launcher} run {run + 1}: exit {code}, checkpoints "
              f"{'kept' if ok else 'LOST: ' + '; '.join(problems)}, saved at steps {saved}, "
              f"{len(left)} process(es) left, {time.monotonic() - started:.1f} s", flush=True)
        if strict:
            if not ok:
                give_up(f"{launcher} run {run + 1}: {'; '.join(problems) or 'no save line'}", [job])
            if left:
                give_up(f"{launcher} run {run + 1}: processes of the job left after it: {left}",
                        [job])
            if code != 128 + signal.SIGTERM:
                give_up(f"{launcher} run {run + 1}: exit {code}, not 143 (stopped by SIGTERM)", [job])
            if launcher == "wrapper" and "wrapper done" in job.output:
                give_up("the wrapper shell outlived the SIGTERM: this run did not test a trainer "
                        "behind a dead wrapper", [job])
        else:
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        shutil.rmtree(run_dir, ignore_errors=True)
    return kept, codes


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ddprun", required=True)
    parser.add_argument("--scenario", required=True, choices=["ddprun", "wrapper", "side-by-side"])
    parser.add_argument("--runs", type=int)
    parser.add_argument("--timeout", type=float, default=270)
    args = parser.parse_args()
    args.ddprun = os.path.abspath(args.ddprun)
    deadline = Deadline(args.timeout)
    if torch_version(TORCH113_PYTHON, deadline.cap(60)) is None:
        return SKIP
    work = tempfile.mkdtemp(prefix="ddprun-drain-test-")
    started = time.monotonic()
    try:
        if args.scenario in ("ddprun", "wrapper"):
            runs = args.runs or (10 if args.scenario == "ddprun" else 2)
            kept, _ = series(args.scenario, runs, args, work, deadline, strict=True)
            print(f"PASS: {args.scenario}: {kept} of {runs} runs kept both checkpoints, "
                  f"{time.monotonic() - started:.1f} s")
            return 0
        runs = args.runs or 3
        results = {}
        for launcher in ("torchrun 1.13", "torchrun 2.6", "ddprun"):
            if launcher == "torchrun 1.13" and not os.path.exists(TORCHRUN):
                results[launcher] = f"skipped: {TORCHRUN} missing"
                continue
            if launcher == "torchrun 2.6":
                probe = Job([TORCH2_PYTHON, "-c", "import torch; print(torch.__version__)"])
                if probe.wait(deadline.cap(60)) == SKIP:
                    results[launcher] = "skipped: " + probe.errors.strip()
                    continue
            kept, codes = series(launcher, runs, args, work, deadline, strict=False)
            results[launcher] = f"{kept} of {runs} runs kept both checkpoints (exit codes {codes})"
        for launcher, result in results.items():
            print(f"{launcher}: {result}")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
