"""A rank that trains on CPU (gloo) from a DataLoader with two worker processes and writes an
emergency checkpoint when asked to stop (tests/launcher/drain_test.py).

    drain_worker.py DIR --notice signal|file

signal  the usual recipe: a SIGTERM handler sets a flag, read at the next step boundary;
file    no signal handler at all: the step boundary looks for $DDPRUN_STOP_FILE (ddprun's stop
        request; docs/env_contract.md, "Stopping gracefully").

Each step the ranks agree on stopping (an all_reduce of the flag: one rank's notice may come a
step before the other's, and a rank that left would leave its peer in a collective). Then each
rank saves DIR/ckpt-<rank>.pt (torch.save, written to a temporary name and renamed, so a file
that exists is complete), prints "rank R: checkpoint saved at step S" and exits 0: the save is
what the rank was asked for, and done. Before that it prints "rank R: in the loop pid P" once,
after its first step, and the DataLoader workers' pids as "rank R: loader pids A B".
"""
import argparse
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("dir")
parser.add_argument("--notice", choices=["signal", "file"], required=True)
args = parser.parse_args()

stop_asked = False
if args.notice == "signal":
    def on_sigterm(signum, frame):
        global stop_asked
        stop_asked = True
    signal.signal(signal.SIGTERM, on_sigterm)
stop_file = os.environ.get("DDPRUN_STOP_FILE")


def asked_to_stop():
    if args.notice == "signal":
        return stop_asked
    return bool(stop_file) and os.path.exists(stop_file)


dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
data = TensorDataset(torch.randn(512, 16), torch.randn(512, 1))
loader = DataLoader(data, batch_size=8, num_workers=2, persistent_workers=True)

step = 0
said_ready = False
while step < 100000:  # a bound, never reached in the test: it stops the job long before
    for inputs, targets in loader:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(inputs), targets).backward()
        optimizer.step()
        step += 1
        if not said_ready:
            said_ready = True
            print(f"rank {rank}: in the loop pid {os.getpid()}", flush=True)
            children = [c.pid for c in getattr(loader._iterator, "_workers", [])]
            print(f"rank {rank}: loader pids {' '.join(map(str, children))}", flush=True)
        agreed = torch.tensor([1 if asked_to_stop() else 0])
        dist.all_reduce(agreed, op=dist.ReduceOp.MAX)
        if agreed.item():
            path = os.path.join(args.dir, f"ckpt-{rank}.pt")
            torch.save({"step": step, "model": model.module.state_dict(),
                        "optimizer": optimizer.state_dict()}, path + ".tmp")
            os.replace(path + ".tmp", path)
            print(f"rank {rank}: checkpoint saved at step {step}", flush=True)
            sys.exit(0)
        time.sleep(0.01)
sys.exit(3)
