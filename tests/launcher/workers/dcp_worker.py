"""DDP training that saves its state with torch.distributed.checkpoint (DCP) and, started again,
resumes from it (tests/launcher/upstream_scripts_test.py, scenario dcp).

    dcp_worker.py CHECKPOINT_DIR STEPS

Every rank prints `rank R: saved step S, weights SUM` after saving, and `rank R: resumed at step S,
weights SUM` after loading. torch 2.x only: torch 1.13 has DCP as
torch.distributed._shard.checkpoint, which Debian's torch 1.13 cannot import on Python 3.11
(a dataclass with a mutable default: docs/env_contract.md, "Scripts nobody here wrote")."""
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    path, steps = sys.argv[1], int(sys.argv[2])
    dist.init_process_group(backend="gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4)
    ddp = DDP(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
    state = {"model": model.state_dict(), "step": torch.zeros(1, dtype=torch.int64)}
    if os.path.exists(os.path.join(path, ".metadata")):
        dcp.load(state, checkpoint_id=path)
        model.load_state_dict(state["model"])
        total = sum(p.sum().item() for p in model.parameters())
        print(f"rank {rank}: resumed at step {int(state['step'])}, weights {total:.6f}", flush=True)
    else:
        for step in range(steps):
            torch.manual_seed(100 + step * dist.get_world_size() + rank)
            optimizer.zero_grad()
            ddp(torch.randn(16, 8)).square().mean().backward()
            optimizer.step()
        state = {"model": model.state_dict(), "step": torch.tensor([steps])}
        dcp.save(state, checkpoint_id=path)
        total = sum(p.sum().item() for p in model.parameters())
        print(f"rank {rank}: saved step {steps}, weights {total:.6f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
