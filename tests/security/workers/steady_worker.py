"""A worker that trains for a few seconds: gloo init_process_group from the launcher's
environment, then STEPS all_reduces with a pause between them, so that a job lasts long enough
for an attack to land while it runs.

    steady_worker.py [STEPS] [PAUSE_SECONDS]

Prints (the drivers read these lines):
  "rank R env: MASTER_ADDR=A MASTER_PORT=P GROUP_RANK=G RESTART=C"  before init_process_group
  "rank R step S"                                                   after each all_reduce
  "rank R: trained N steps (restart C)"                             at the end
"""
import os
import sys
import time

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 16
pause = float(sys.argv[2]) if len(sys.argv) > 2 else 0.25
rank = os.environ.get("RANK", "?")
restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "?")
print(f"rank {rank} env: MASTER_ADDR={os.environ.get('MASTER_ADDR')} "
      f"MASTER_PORT={os.environ.get('MASTER_PORT')} GROUP_RANK={os.environ.get('GROUP_RANK')} "
      f"RESTART={restart}", flush=True)

import torch  # noqa: E402  (after the env line: importing torch takes a while)
import torch.distributed as dist  # noqa: E402

dist.init_process_group("gloo")
world = dist.get_world_size()
for step in range(steps):
    tensor = torch.ones(1)
    dist.all_reduce(tensor)
    assert tensor.item() == world, tensor
    print(f"rank {rank} step {step}", flush=True)
    time.sleep(pause)
dist.barrier()
print(f"rank {rank}: trained {steps} steps (restart {restart})", flush=True)
# No process-group teardown: torch 1.13's gloo can deadlock in its destructor at exit
# (examples/train_ddp.py's exit_now says how).
sys.stderr.flush()
os._exit(0)
