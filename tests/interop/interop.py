#!/usr/bin/env python3
"""Runs real PyTorch clients against a real ddprun-rendezvous daemon.

  interop.py store-ops  --python PY --daemon BIN
  interop.py allreduce  --python PY --daemon BIN [--world N]

PY is the interpreter with torch: /usr/bin/python3 (torch 1.13) or scripts/torch2-python
(torch 2.6 in a chroot; it exits 77 when the chroot is missing, and so does this script, which
CTest reports as skipped). The daemon is started on port 0 and must exit 0 on SIGTERM afterwards.
"""
import argparse
import os
import signal
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from jobs import Deadline, Job, give_up, run, wait_all  # noqa: E402

SKIP = 77
# CTest gives each of these tests 300 s; every wait here takes from this budget, so a hang is
# reported (with the process tree and the output so far) long before CTest would kill us silently.
BUDGET = 150


def start_daemon(binary, deadline):
    daemon = Job([binary, "--port", "0"], name="ddprun-rendezvous")
    line = daemon.read_line(deadline.cap(20))
    if line is None or not line.startswith("listening on "):
        give_up("the daemon did not start (first line: %r)" % line, [daemon])
    return daemon, int(line.rsplit(":", 1)[1])


def stop_daemon(daemon, deadline):
    daemon.signal(signal.SIGTERM)
    code = daemon.wait(deadline.cap(20))
    if code != 0:
        give_up("daemon exited %s on SIGTERM" % code, [daemon])


def check_python(python, deadline):
    probe = run([python, "-c", "import torch; print(torch.__version__)"], deadline.cap(90),
                name="torch probe")
    if probe.returncode == SKIP:
        print(probe.errors.strip() or "torch interpreter not available: skipped")
        sys.exit(SKIP)
    if probe.returncode != 0:
        sys.exit(f"{python} cannot import torch: {probe.errors.strip()}")
    return probe.output.strip()


def store_ops(args):
    deadline = Deadline(BUDGET)
    version = check_python(args.python, deadline)
    daemon, port = start_daemon(args.daemon, deadline)
    client = Job([args.python, os.path.join(HERE, "torch_store_client.py"), str(port)],
                 name="torch store client")
    wait_all([client], deadline, f"torch {version} store client", also=[daemon])
    print(client.output, end="")
    print(client.errors, end="", file=sys.stderr)
    stop_daemon(daemon, deadline)
    if client.returncode != 0:
        sys.exit(f"torch {version} store client failed with exit code {client.returncode}")


def allreduce(args):
    deadline = Deadline(BUDGET)
    version = check_python(args.python, deadline)
    daemon, port = start_daemon(args.daemon, deadline)
    workers = []
    for rank in range(args.world):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                   WORLD_SIZE=str(args.world), LOCAL_RANK=str(rank),
                   TORCHELASTIC_USE_AGENT_STORE="True", TORCHELASTIC_RESTART_COUNT="0")
        workers.append(Job([args.python, os.path.join(HERE, "gloo_allreduce_worker.py")],
                           name=f"rank {rank}", env=env))
    wait_all(workers, deadline, f"torch {version} gloo ranks", also=[daemon])
    stop_daemon(daemon, deadline)
    expected = args.world * (args.world + 1) // 2
    for rank, worker in enumerate(workers):
        print(worker.output.strip())
        if worker.returncode != 0 or f"rank {rank}: sum {expected}" not in worker.output:
            print(worker.describe(), file=sys.stderr)
            sys.exit(f"torch {version} rank {rank} failed (exit {worker.returncode})")
    print(f"torch {version}: {args.world}-rank gloo all_reduce through ddprun-rendezvous: sum {expected}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["store-ops", "allreduce"])
    parser.add_argument("--python", required=True)
    parser.add_argument("--daemon", required=True)
    parser.add_argument("--world", type=int, default=2)
    args = parser.parse_args()
    {"store-ops": store_ops, "allreduce": allreduce}[args.mode](args)


if __name__ == "__main__":
    main()
