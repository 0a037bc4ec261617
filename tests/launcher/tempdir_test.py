#!/usr/bin/env python3
"""Temporary directories as torchrun has them (issue #19, point 3): torchrun takes its directories
from Python's tempfile.gettempdir(), which skips an unusable TMPDIR (missing, not a directory,
read-only) and tries TEMP, TMP, /tmp, /var/tmp, /usr/tmp and the working directory. ddprun chooses
the same way, says so in one line, and hands its workers absolute paths only.

    tempdir_test.py --ddprun BIN --scenario NAME [--torchrun-python PY]

  missing        TMPDIR names a directory that does not exist: the job runs (exit 0), one warning
                 names the fallback; torchrun 1.13 runs the same job too (side by side)
  relative       TMPDIR is a relative directory: the worker's TORCHELASTIC_ERROR_FILE and
                 DDPRUN_HEARTBEAT_FILE are absolute, and a worker that changes directory can
                 still write its error file
  readonly-tmp   /tmp read-only (a mount namespace of the test's) and TMPDIR unset: the job runs
                 under /var/tmp; skipped (77) where a mount namespace cannot be made

Every run is bounded (a timeout) and prints what it saw when it fails.
"""
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from side_by_side import SKIP, TORCHRUN, check, run, scenario_main, torchrun_command  # noqa: E402

# The worker: its paths, then (in `relative`) a change of directory and a write of its error file.
WORKER = ('echo "EF=$TORCHELASTIC_ERROR_FILE"; echo "HB=$DDPRUN_HEARTBEAT_FILE"; '
          'cd / && echo "{}" > "$TORCHELASTIC_ERROR_FILE" && echo WROTE')


def worker_paths(stdout):
    paths = {}
    for line in stdout.splitlines():
        for name in ("EF", "HB"):
            if name + "=" in line:
                paths[name] = line.split(name + "=", 1)[1]
    return paths


def ddprun_job(args, env, cwd):
    return run([args.ddprun, "--standalone", "--nproc-per-node", "1", "--no-python",
                "/bin/sh", "-c", WORKER], env, cwd)


def missing(args, work):
    env = dict(os.environ, TMPDIR=os.path.join(work, "does-not-exist"))
    done = ddprun_job(args, env, work)
    check(done.returncode == 0, "ddprun did not run the job with a missing TMPDIR", done)
    warnings = [line for line in done.stderr.splitlines() if "temporary files go under" in line]
    check(len(warnings) == 1 and "does-not-exist" in warnings[0], "not one line naming the fallback", done)
    check(worker_paths(done.stdout).get("EF", "").startswith("/tmp/"), "the error file is not under /tmp", done)
    if not os.path.exists(TORCHRUN) or shutil.which(args.torchrun_python) is None:
        print(f"torchrun side by side skipped: {TORCHRUN} or {args.torchrun_python} is missing")
        return
    anchor = run(torchrun_command(args.torchrun_python, "--nproc_per_node", "1", "--no_python",
                  "/bin/sh", "-c", WORKER), env, work, timeout=120)
    check(anchor.returncode == 0, "torchrun 1.13 did not run the job either: the anchor is broken", anchor)
    print("torchrun 1.13 and ddprun both run the job with a missing TMPDIR")


def relative(args, work):
    os.mkdir(os.path.join(work, "scratch"))
    env = dict(os.environ, TMPDIR="scratch")
    done = ddprun_job(args, env, work)
    check(done.returncode == 0, "the job with a relative TMPDIR failed", done)
    paths = worker_paths(done.stdout)
    for name in ("EF", "HB"):
        check(os.path.isabs(paths.get(name, "")), f"the worker's {name} path is not absolute", done)
    check(paths["EF"].startswith(os.path.join(work, "scratch") + "/"), "the error file is not under TMPDIR", done)
    check("WROTE" in done.stdout, "the worker could not write its error file after changing directory", done)


def readonly_tmp(args, work):
    if shutil.which("unshare") is None or os.geteuid() != 0:
        print("SKIP: a read-only /tmp needs root and unshare (a mount namespace of the test's)")
        sys.exit(SKIP)
    probe = run(["unshare", "-m", "sh", "-c", "mount -o bind,ro /tmp /tmp"], dict(os.environ), work, timeout=30)
    if probe.returncode != 0:
        print(f"SKIP: cannot make a mount namespace with a read-only /tmp: {probe.stderr.strip()}")
        sys.exit(SKIP)
    env = {k: v for k, v in os.environ.items() if k not in ("TMPDIR", "TEMP", "TMP")}
    script = ('mount -o bind,ro /tmp /tmp && exec "$0" --standalone --nproc-per-node 1 --no-python '
              '/bin/sh -c \'echo "EF=$TORCHELASTIC_ERROR_FILE"\'')
    done = run(["unshare", "-m", "sh", "-c", script, args.ddprun], env, work)
    check(done.returncode == 0, "the job with a read-only /tmp failed", done)
    check(worker_paths(done.stdout).get("EF", "").startswith("/var/tmp/"), "the error file is not under /var/tmp", done)
    check("temporary files go under /var/tmp" in done.stderr, "no line says where temporary files went", done)


SCENARIOS = {"missing": missing, "relative": relative, "readonly-tmp": readonly_tmp}


if __name__ == "__main__":
    # Not under /tmp: the read-only scenario must be able to run from it.
    scenario_main(__doc__, SCENARIOS, prefix="ddprun-tempdir-test-", work_dir=os.getcwd())
