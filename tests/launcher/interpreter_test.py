#!/usr/bin/env python3
"""torchrun's interpreter rule (issue #19, point 4): every training script that is not
--no-python runs as `$PYTHON_EXEC -u script`, whatever its suffix or shebang.

    interpreter_test.py --ddprun BIN --scenario NAME

  shebang      an executable console-script style `train` (no .py, `#!/usr/bin/env python3`) with a
               torch-less python3 first on PATH and PYTHON_EXEC naming the interpreter that has
               torch: every rank runs under PYTHON_EXEC with -u and imports torch, under ddprun
               and torchrun 1.13 side by side
  not-python   a shell script given without --no-python: ddprun stops with one line naming
               --no-python and exit 2 before any worker; torchrun 1.13 hands it to Python and
               fails in every rank (its exit code is printed beside ddprun's)
  missing-module  a tutorial-style DDP script with the torch-less python3 first on PATH and no
               PYTHON_EXEC, 1, 2, 4 and 8 workers, 10 runs each: every run says at start which
               interpreter it chose and where from, and ends with exactly one hint naming that
               interpreter's full path, "the first python3 on PATH" and PYTHON_EXEC; with
               PYTHON_EXEC set the same script runs, with neither line

Every run is bounded (a timeout) and prints what it saw when it fails.
"""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from side_by_side import SKIP, TORCHRUN, check, run, scenario_main, torchrun_command  # noqa: E402

TORCH_PYTHON = "/usr/bin/python3"
TRAIN = """#!/usr/bin/env python3
import os, sys
import torch
print(f"rank {os.environ['RANK']} python={sys.executable} unbuffered={'-u' in sys.orig_argv} torch={torch.__version__}")
"""


def environment(work):
    # A python3 without torch first on PATH: Python with -S has no site-packages, so no torch.
    fake = os.path.join(work, "fakebin")
    os.mkdir(fake)
    with open(os.path.join(fake, "python3"), "w") as f:
        f.write(f"#!/bin/sh\nexec {TORCH_PYTHON} -S \"$@\"\n")
    os.chmod(os.path.join(fake, "python3"), 0o755)
    env = dict(os.environ)
    env["PATH"] = fake + ":" + env.get("PATH", "/usr/bin:/bin")
    env["PYTHON_EXEC"] = TORCH_PYTHON
    env.pop("TORCHELASTIC_ERROR_FILE", None)
    return env


def launchers(ddprun, script):
    yield "ddprun", [ddprun, "--standalone", "--nproc_per_node", "2", script]  # 1.13's spelling
    if os.path.exists(TORCHRUN):
        yield "torchrun 1.13", torchrun_command(TORCH_PYTHON, "--nproc_per_node", "2", script)
    else:
        print(f"note: {TORCHRUN} is missing; torchrun's side is not run")


def shebang(ddprun, work, env):
    path = os.path.join(work, "train")
    with open(path, "w") as f:
        f.write(TRAIN)
    os.chmod(path, 0o755)
    # Its shebang alone would pick the torch-less python3 first on PATH.
    alone = run(["./train"], env, work, timeout=30)
    check(alone.returncode != 0 and "torch" in alone.stderr,
          "the test's premise: ./train run directly should fail to import torch", alone)
    for name, argv in launchers(ddprun, "./train"):
        done = run(argv, env, work, timeout=90)
        print(f"{name}: exit {done.returncode}")
        check(done.returncode == 0, f"{name} should run ./train under PYTHON_EXEC", done)
        for rank in (0, 1):
            line = f"rank {rank} python={TORCH_PYTHON} unbuffered=True torch="
            check(line in done.stdout, f"{name}: rank {rank} should report {line!r}", done)


def not_python(ddprun, work, env):
    path = os.path.join(work, "job.sh")
    with open(path, "w") as f:
        f.write("#!/bin/sh\necho ran as a shell script\n")
    os.chmod(path, 0o755)
    codes = {}
    for name, argv in launchers(ddprun, "./job.sh"):
        done = run(argv, env, work)
        codes[name] = done.returncode
        if name == "ddprun":
            check(done.returncode == 2, "ddprun should refuse a shell script without --no-python", done)
            lines = [line for line in done.stderr.splitlines() if line.strip()]
            check(len(lines) == 1 and "--no-python" in lines[0] and "a script for /bin/sh" in lines[0],
                  "one line naming --no-python", done)
            check("ran as a shell script" not in done.stdout, "no worker should have started", done)
    print("exit codes side by side:", codes)
    # With --no-python it runs, as under torchrun.
    done = run([ddprun, "--standalone", "--nproc-per-node", "2", "--no-python", "./job.sh"], env, work)
    check(done.returncode == 0 and done.stdout.count("ran as a shell script") == 2,
          "with --no-python both ranks run the shell script", done)


TUTORIAL = """import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader


def main():
    dist.init_process_group("gloo")
    model = DDP(torch.nn.Linear(4, 1))
    print(f"rank {os.environ['RANK']} trained {sum(p.numel() for p in model.parameters())}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""


def missing_module(ddprun, work, env):
    path = os.path.join(work, "multigpu_torchrun.py")
    with open(path, "w") as f:
        f.write(TUTORIAL)
    fake = os.path.join(work, "fakebin", "python3")
    bare = dict(env)
    bare.pop("PYTHON_EXEC")
    for workers in (1, 2, 4, 8):
        for attempt in range(10):
            done = run([ddprun, "--standalone", "--nproc_per_node", str(workers), path], bare, work,
                       timeout=60)
            check(done.returncode != 0, f"{workers} worker(s): the job should fail", done)
            hints = [line for line in done.stderr.splitlines() if line.startswith("ddprun: hint:")]
            check(len(hints) == 1, f"{workers} worker(s), run {attempt + 1}: one hint", done)
            for part in (f"under {fake} (the first python3 on PATH)", "torch",
                         "PYTHON_EXEC=/path/to/python"):
                check(part in hints[0], f"{workers} worker(s): the hint should say {part!r}", done)
            check(f"ddprun: note: the workers run under {fake}, the first python3 on PATH"
                  in done.stderr, f"{workers} worker(s): the interpreter said at start", done)
        print(f"{workers} worker(s), 10 runs: the hint every time: {hints[0]}")
    done = run([ddprun, "--standalone", "--nproc_per_node", "2", path], env, work, timeout=120)
    check(done.returncode == 0 and done.stdout.count("trained 5") == 2,
          "with PYTHON_EXEC the same script runs", done)
    check("ddprun: hint:" not in done.stderr and "first python3 on PATH" not in done.stderr,
          "with PYTHON_EXEC: no hint and no note", done)
    print("with PYTHON_EXEC: both ranks ran")


def scenario(body):
    """`body(ddprun, work, env)` as a scenario; skipped where the workers' interpreter has no torch."""
    def run_it(args, work):
        probe = subprocess.run([TORCH_PYTHON, "-c", "import torch"], capture_output=True, timeout=60)
        if probe.returncode != 0:
            print(f"skipped: {TORCH_PYTHON} has no torch")
            sys.exit(SKIP)
        body(args.ddprun, work, environment(work))
    return run_it


if __name__ == "__main__":
    scenario_main(__doc__, {"shebang": scenario(shebang), "not-python": scenario(not_python),
                            "missing-module": scenario(missing_module)},
                  prefix="ddprun-interpreter-")
