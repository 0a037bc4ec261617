"""One rank of a real gloo job: init_process_group from the environment, all_reduce, barrier.

With TORCHELASTIC_USE_AGENT_STORE=True every rank (rank 0 included) connects as a client to the
store at MASTER_ADDR:MASTER_PORT, which is how workers under a launcher find its store.
Prints "rank R: sum S".
"""
import os
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo", init_method="env://")
rank = dist.get_rank()
world = dist.get_world_size()
tensor = torch.tensor([float(rank + 1)] * 4)
dist.all_reduce(tensor)
dist.barrier()
expected = world * (world + 1) / 2
assert tensor.tolist() == [expected] * 4, tensor
print(f"rank {rank}: sum {int(tensor[0].item())}", flush=True)
# No destroy_process_group() and no interpreter teardown: torch 1.13's gloo process group can
# deadlock in its destructor at exit (examples/train_ddp.py's exit_now says how).
sys.stderr.flush()
os._exit(0)
