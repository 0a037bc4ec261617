"""A small but real data-parallel training job, written the way people write them for torchrun.

Gloo on CPU: init_process_group from the environment the launcher sets, a DistributedSampler
sharding the data, DistributedDataParallel averaging the gradients, rank 0 saving a checkpoint.
It checks what a launcher must get right: the loss falls, and every rank ends with identical
parameters.

    ddprun --standalone --nproc-per-node 4 examples/train_ddp.py --epochs 5
    torchrun ... (the same command line works under torchrun)
"""
import argparse
import hashlib
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--checkpoint", default="", help="rank 0 saves the model here")
    return parser.parse_args()


def synthetic_regression(samples=2048, features=16):
    """The same data on every rank (fixed seed): y = f(X) + noise."""
    generator = torch.Generator().manual_seed(1234)
    x = torch.randn(samples, features, generator=generator)
    w = torch.randn(features, 1, generator=generator)
    y = torch.tanh(x @ w) + 0.01 * torch.randn(samples, 1, generator=generator)
    return TensorDataset(x, y)


def parameter_digest(model):
    data = b"".join(p.detach().contiguous().numpy().tobytes() for p in model.parameters())
    return hashlib.sha256(data).hexdigest()[:16]


def main():
    args = parse_args()
    dist.init_process_group("gloo")  # env://: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ["LOCAL_RANK"])
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    if rank == 0:
        print(f"training on {world} ranks (restart {restart})", flush=True)

    torch.manual_seed(0)  # the same initial weights everywhere; DDP also broadcasts rank 0's
    dataset = synthetic_regression()
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)
    model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1))
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=args.lr)

    losses = []
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        total = torch.zeros(2)
        for x, y in loader:
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(ddp(x), y)
            loss.backward()
            optimizer.step()
            total += torch.tensor([loss.item() * len(x), len(x)])
        dist.all_reduce(total)  # the epoch's mean loss over the whole dataset
        losses.append((total[0] / total[1]).item())
        if rank == 0:
            print(f"epoch {epoch}: loss {losses[-1]:.6f}", flush=True)

    digests = [None] * world
    dist.all_gather_object(digests, parameter_digest(model))
    print(f"rank {rank} (local {local_rank}): parameters {digests[rank]}", flush=True)
    if rank == 0:
        assert len(set(digests)) == 1, f"ranks disagree on the parameters: {digests}"
        assert losses[-1] < 0.5 * losses[0], f"the loss did not fall: {losses}"
        print(f"OK: loss {losses[0]:.4f} -> {losses[-1]:.4f}; all {world} ranks hold identical "
              f"parameters {digests[0]}", flush=True)
        if args.checkpoint:
            torch.save({"model": model.state_dict(), "losses": losses}, args.checkpoint)
            print(f"checkpoint saved to {args.checkpoint}", flush=True)
    dist.barrier()  # every rank is done (and rank 0's checkpoint is written) before any leaves


def exit_now(code=0):
    """Leave without running the process group's destructors.

    Under torch 1.13 the gloo process group's destructor can deadlock at exit: the main thread,
    holding the GIL, joins ProcessGroupGloo's worker thread (reached from the DDP Reducer's
    destructor), while that thread waits for the GIL to free a tensor. One rank then never exits
    although its training is finished (seen in about 1 run of 10, under torchrun as well). Once
    the job's work is done and its files are closed nothing is left to clean up that the kernel
    does not, so the process ends here, after flushing its output.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
    exit_now(0)
