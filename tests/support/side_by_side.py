"""What the tests that run a job under ddprun beside torchrun 1.13 share (tempdir, interpreter,
output, detach): where torchrun is, one bounded run, one way to fail with what was seen, and the
`--ddprun BIN --scenario NAME` entry point.

    sys.path.insert(0, os.path.join(HERE, "..", "support"))
    from side_by_side import TORCHRUN, check, fail, run, scenario_main
    scenario_main(__doc__, {"missing": missing}, prefix="ddprun-tempdir-test-")
"""
import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile

from jobs import SKIP  # noqa: F401  (re-exported: the scenario scripts skip with it)

# Debian's torchrun 1.13 on Python 3.11 (../shared/tools beside the repository).
TORCHRUN = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                         "shared", "tools", "torchrun-py311.py"))


def torchrun_command(python, *options):
    """torchrun 1.13 as `--standalone` runs it, but on a port of its own: 1.13's --standalone always
    takes localhost:29400 and, when that is busy (another test beside this one), silently joins
    whatever job listens there. `options` follow (--nproc_per_node N, the script, ...)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return [python, TORCHRUN, "--nnodes", "1", "--rdzv_backend", "c10d", "--rdzv_endpoint",
            f"127.0.0.1:{port}", *options]


def fail(message):
    print(f"FAIL: {message}", flush=True)
    sys.exit(1)


def shown(done):
    """A finished run as the failure message shows it."""
    return f"--- exit {done.returncode}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"


def check(condition, message, done):
    if not condition:
        fail(f"{message}\n{shown(done)}")


def run(argv, env, cwd, timeout=60, hint=""):
    """`argv` to its end, output captured; fails (printing the output so far) after `timeout` s."""
    try:
        return subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as expired:
        fail(f"{argv[0]} did not finish within {timeout} s{hint}; output so far:\n"
             f"{expired.stdout}\n{expired.stderr}")


def scenario_main(doc, scenarios, prefix, work_dir=None, before=None, after=None):
    """Parses `--ddprun BIN --scenario NAME [--torchrun-python PY]`, runs scenarios[NAME](args,
    work) in a fresh scratch directory (under `work_dir`, default $TMPDIR) and removes it after.
    `before(args, work)` may return extra arguments for the scenario; `after()` runs last."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--ddprun", required=True)
    parser.add_argument("--scenario", required=True, choices=sorted(scenarios))
    parser.add_argument("--torchrun-python", default="/usr/bin/python3")
    args = parser.parse_args()
    args.ddprun = os.path.abspath(args.ddprun)  # the launchers run in the scratch directory
    work = tempfile.mkdtemp(prefix=prefix, dir=work_dir)
    try:
        extra = before(args, work) if before else ()
        scenarios[args.scenario](args, work, *extra)
    finally:
        if after:
            after()
        shutil.rmtree(work, ignore_errors=True)
    print(f"PASS: {args.scenario}")
