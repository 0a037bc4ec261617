#!/usr/bin/python3
"""torch 1.13's counterpart of examples/allreduce_bench.cc: all-reduce bandwidth over gloo.

Launched the same way, under ddprun (or torchrun), one process per rank:

  ddprun --standalone --nproc-per-node 4 /usr/bin/python3 tests/bench/torch_allreduce.py --csv \
         [--min-bytes 1K] [--max-bytes 256M]

It mirrors allreduce_bench step for step so that only the collective differs:
- torch.distributed.init_process_group("gloo") from the launcher's env:// variables (the store is
  the agent's, at MASTER_ADDR:MASTER_PORT);
- one float32 CPU buffer of --max-bytes ones; for each size from --min-bytes to --max-bytes
  (doubling), its first `bytes` as a contiguous view, summed in place with dist.all_reduce;
- iterations per size = clamp(256 MiB / bytes, 5, 2000), 3 warm-up calls, a barrier, the timed
  loop, then the time of the slowest rank (an all_reduce MAX of a float64);
- algbw = bytes / time, busbw = algbw * 2 (n - 1) / n; rank 0 prints the same CSV
  (impl,ranks,bytes,iterations,time_us,algbw_gbps,busbw_gbps) with impl "torch";
- the view is reset to ones after each size, as allreduce_bench does.

torch.set_num_threads(1): the launcher already sets OMP_NUM_THREADS=1 and gloo's all-reduce on
CPU does not use torch's intra-op pool, so this only pins down what torch would otherwise pick;
ProcessGroupGloo's own worker threads (2 by default in 1.13) are left as torch makes them, since
that is what a torch user gets.
"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist


def parse_bytes(text):
    units = {"": 1, "k": 1024, "m": 1024 ** 2, "g": 1024 ** 3}
    number = text.rstrip("kKmMgG")
    unit = text[len(number):].lower()
    if unit not in units or len(unit) > 1:
        raise argparse.ArgumentTypeError(f"'{text}' is not a size (e.g. 1024, 64K, 256M)")
    return int(float(number) * units[unit])


def iterations_for(nbytes):
    budget = 256 << 20  # bytes moved per size, roughly (as allreduce_bench)
    return max(5, min(2000, budget // nbytes))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--min-bytes", type=parse_bytes, default=1024)
    parser.add_argument("--max-bytes", type=parse_bytes, default=256 << 20)
    parser.add_argument("--csv", action="store_true")
    args = parser.parse_args()
    min_bytes = max(args.min_bytes, 4)

    torch.set_num_threads(1)
    dist.init_process_group("gloo")  # env:// from the launcher
    rank, world = dist.get_rank(), dist.get_world_size()

    buffer = torch.ones(args.max_bytes // 4, dtype=torch.float32)
    if rank == 0:
        if args.csv:
            print("impl,ranks,bytes,iterations,time_us,algbw_gbps,busbw_gbps")
        else:
            print(f"# torch {torch.__version__} all_reduce (sum, float32, in place), {world} ranks, gloo")
            print(f"{'bytes':>12} {'count':>10} {'iters':>8} {'time_us':>12} {'algbw_GB/s':>12} "
                  f"{'busbw_GB/s':>12}")
        sys.stdout.flush()

    nbytes = min_bytes
    while nbytes <= args.max_bytes:
        count = nbytes // 4
        data = buffer[:count]  # a contiguous view: all_reduce works on it in place
        iterations = iterations_for(nbytes)
        for _ in range(3):  # warm up
            dist.all_reduce(data)
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iterations):
            dist.all_reduce(data)
        seconds = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
        dist.all_reduce(seconds, op=dist.ReduceOp.MAX)  # the slowest rank sets the pace
        per_op = seconds.item() / iterations
        algbw = nbytes / per_op / 1e9
        busbw = algbw * 2.0 * (world - 1) / world
        if rank == 0:
            if args.csv:
                print(f"torch,{world},{nbytes},{iterations},{per_op * 1e6:.3f},{algbw:.4f},{busbw:.4f}")
            else:
                print(f"{nbytes:>12} {count:>10} {iterations:>8} {per_op * 1e6:>12.2f} "
                      f"{algbw:>12.4f} {busbw:>12.4f}")
            sys.stdout.flush()
        data.fill_(1.0)  # keep the values bounded, as allreduce_bench does
        nbytes *= 2
    dist.barrier()


if __name__ == "__main__":
    main()
    # No interpreter teardown: torch 1.13's gloo process group can deadlock in its destructor at
    # exit (examples/train_ddp.py's exit_now says how).
    sys.stdout.flush()
    os._exit(0)
