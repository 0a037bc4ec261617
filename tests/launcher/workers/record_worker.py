"""A training script's main decorated with torch's @record that raises on rank 1 after the group
has formed, while rank 0 is busy elsewhere (and is stopped by the launcher).
@record writes the exception to TORCHELASTIC_ERROR_FILE, and the launcher's summary shows it as
the root cause (tests/launcher/upstream_scripts_test.py, scenario record)."""
import os
import time

import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record


def load_shard(rank):
    raise ValueError(f"shard {rank} is corrupt: checksum mismatch")


@record
def main():
    dist.init_process_group(backend="gloo")
    rank = dist.get_rank()
    print(f"rank {rank} of {dist.get_world_size()} ready", flush=True)
    dist.barrier()
    if rank == 1:
        load_shard(rank)
    # Rank 0 works on without a collective (one would fail at once when rank 1's connection
    # closes, racing rank 1 for the summary); the launcher stops it. The bound keeps a launcher
    # that does not from leaving it behind.
    time.sleep(60)
    print(f"rank {rank} still here", flush=True)


if __name__ == "__main__":
    main()
