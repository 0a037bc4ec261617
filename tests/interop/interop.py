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
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SKIP = 77


def start_daemon(binary):
    daemon = subprocess.Popen([binary, "--port", "0"], stdout=subprocess.PIPE, text=True)
    line = daemon.stdout.readline().strip()
    if not line.startswith("listening on "):
        daemon.kill()
        sys.exit(f"daemon did not start: {line!r}")
    return daemon, int(line.rsplit(":", 1)[1])


def stop_daemon(daemon):
    daemon.send_signal(signal.SIGTERM)
    code = daemon.wait(timeout=10)
    if code != 0:
        sys.exit(f"daemon exited {code} on SIGTERM")


def check_python(python):
    probe = subprocess.run([python, "-c", "import torch; print(torch.__version__)"],
                           capture_output=True, text=True)
    if probe.returncode == SKIP:
        print(probe.stderr.strip() or "torch interpreter not available: skipped")
        sys.exit(SKIP)
    if probe.returncode != 0:
        sys.exit(f"{python} cannot import torch: {probe.stderr.strip()}")
    return probe.stdout.strip()


def store_ops(args):
    version = check_python(args.python)
    daemon, port = start_daemon(args.daemon)
    try:
        run = subprocess.run([args.python, os.path.join(HERE, "torch_store_client.py"), str(port)],
                             timeout=120)
    finally:
        stop_daemon(daemon)
    if run.returncode != 0:
        sys.exit(f"torch {version} store client failed with exit code {run.returncode}")


def allreduce(args):
    version = check_python(args.python)
    daemon, port = start_daemon(args.daemon)
    workers = []
    try:
        for rank in range(args.world):
            env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                       WORLD_SIZE=str(args.world), LOCAL_RANK=str(rank),
                       TORCHELASTIC_USE_AGENT_STORE="True", TORCHELASTIC_RESTART_COUNT="0")
            workers.append(subprocess.Popen(
                [args.python, os.path.join(HERE, "gloo_allreduce_worker.py")], env=env,
                stdout=subprocess.PIPE, text=True))
        outputs = [w.communicate(timeout=120)[0] for w in workers]
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
        stop_daemon(daemon)
    expected = args.world * (args.world + 1) // 2
    for rank, (worker, output) in enumerate(zip(workers, outputs)):
        print(output.strip())
        if worker.returncode != 0 or f"rank {rank}: sum {expected}" not in output:
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
