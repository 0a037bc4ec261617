#!/usr/bin/env python3
"""Real PyTorch DDP training (examples/train_ddp.py: gloo, DistributedSampler, DDP, rank 0 saves
a checkpoint) under ddprun, and the checks a user relies on: the loss falls, every rank ends with
identical parameters, the checkpoint exists, ddprun exits 0.

  ddp_training.py --ddprun BIN --python PY --scenario standalone|2nodes [--etcd ENDPOINTS]

PY is /usr/bin/python3 (torch 1.13) or scripts/torch2-python (torch 2.6 in a chroot; exit 77 =
skipped when it is missing). 2nodes runs two agents on 127.0.0.1 (c10d), 2 workers each; with
--etcd, they rendezvous on that etcd instead (--rdzv-backend etcd; tests/launcher/etcd_rdzv_test.cc
starts the etcd and runs this).
"""
import argparse
import atexit
import os
import re
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "..", "examples", "train_ddp.py")
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from jobs import Deadline, Job, run, wait_all  # noqa: E402
from ports import free_port  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ddprun", required=True)
    parser.add_argument("--python", required=True)
    parser.add_argument("--scenario", choices=["standalone", "2nodes"], required=True)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--etcd", help="2nodes over this etcd (--rdzv-endpoint) instead of c10d")
    # For everything, the torch probe included: half of CTest's TIMEOUT (600 s), so that a hang
    # is reported with the process tree and the output so far instead of killed without a word.
    parser.add_argument("--timeout", type=float, default=300)
    args = parser.parse_args()
    deadline = Deadline(args.timeout)

    probe = run([args.python, "-c", "import torch; print(torch.__version__)"], deadline.cap(90),
                name="torch probe")
    if probe.returncode == 77:
        print(probe.errors.strip())
        return 77
    if probe.returncode != 0:
        sys.exit(f"{args.python} has no torch: {probe.errors.strip()}")
    version = probe.output.strip()

    work = tempfile.mkdtemp(prefix="ddprun-ddp-")
    atexit.register(shutil.rmtree, work, ignore_errors=True)  # the checkpoint is checked before the exit
    checkpoint = os.path.join(work, "model.pt")
    env = dict(os.environ, PYTHON_EXEC=args.python)
    script = [os.path.abspath(EXAMPLE), "--epochs", str(args.epochs), "--checkpoint", checkpoint]
    if args.scenario == "standalone":
        commands = [[args.ddprun, "--standalone", "--nproc-per-node", "4", *script]]
        world = 4
    else:
        backend, endpoint = ("etcd", args.etcd) if args.etcd else ("c10d", f"127.0.0.1:{free_port()}")
        commands = [[args.ddprun, "--nnodes", "2", "--nproc-per-node", "2", "--rdzv-backend", backend,
                     "--rdzv-endpoint", endpoint, "--rdzv-id", f"ddp-{os.getpid()}", *script]
                    for _ in range(2)]
        world = 4
    agents = [Job(c, name=f"ddprun agent {i}", env=env) for i, c in enumerate(commands)]
    wait_all(agents, deadline, f"torch {version}: the job (timeout {args.timeout:.0f} s)")
    out = "".join(a.output for a in agents)
    err = "".join(a.errors for a in agents)
    print(out)
    failed = [a.returncode for a in agents if a.returncode != 0]
    if failed:
        print(err, file=sys.stderr)
        sys.exit(f"torch {version}: ddprun exited {failed}")
    # Every worker line is whole and prefixed; rank 0 checked the loss and the parameters.
    ok = re.search(r"^\[default0\]:OK: loss ([0-9.]+) -> ([0-9.]+); all (\d+) ranks hold identical "
                   r"parameters (\w+)$", out, re.M)
    if not ok or int(ok.group(3)) != world:
        sys.exit(f"torch {version}: rank 0 did not confirm training on {world} ranks")
    per_rank = re.findall(r"^\[default\d\]:rank \d \(local \d\): parameters (\w+)$", out, re.M)
    digests = set(per_rank)
    if digests != {ok.group(4)} or len(per_rank) != world:
        sys.exit(f"torch {version}: ranks disagree on the parameters: {digests}")
    if not os.path.exists(checkpoint):
        sys.exit(f"torch {version}: rank 0 saved no checkpoint")
    over = " over etcd" if args.etcd else ""
    print(f"torch {version}, {args.scenario}{over}: loss {ok.group(1)} -> {ok.group(2)}, {world} ranks with "
          f"identical parameters {ok.group(4)}, checkpoint saved")
    return 0


if __name__ == "__main__":
    sys.exit(main())
