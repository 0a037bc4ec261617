#!/usr/bin/python3
"""Side-by-side benchmark of ddprun's runtime (Gloo backend) against torch 1.13's gloo all_reduce.

Both programs run under the same launcher (ddprun --standalone), one process per rank, and
measure the same thing the same way (see tests/bench/torch_allreduce.py): an in-place float32 sum
all-reduce per size from --min-bytes to --max-bytes, the slowest rank's time, and
busbw = algbw * 2 (n - 1) / n. The two alternate, and each figure is the median of --repeats runs.

  bench_allreduce.py --ddprun build-release/launcher/ddprun \
                     --allreduce-bench build-release/examples/allreduce_bench [--ranks 2 4]
"""
import argparse
import csv
import datetime
import os
import platform
import statistics
import subprocess
import sys
import bench_json  # (--json: the printed tables as one document)

HERE = os.path.dirname(os.path.abspath(__file__))
TORCH_BENCH = os.path.join(HERE, "torch_allreduce.py")


def run(ddprun, ranks, program, sizes):
    """One run of one implementation: {bytes: busbw GB/s} from rank 0's CSV."""
    argv = [ddprun, "--standalone", "--nproc-per-node", str(ranks), "--no-python", *program,
            "--csv", "--min-bytes", str(sizes[0]), "--max-bytes", str(sizes[1])]
    # The agent prefixes each worker line with "[default<local rank>]:"; only rank 0 prints.
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    lines = [line.split("]:", 1)[-1] for line in proc.stdout.splitlines()]
    rows = csv.DictReader(line for line in lines if line.startswith(("impl,", "ddprun,", "torch,")))
    return {int(row["bytes"]): float(row["busbw_gbps"]) for row in rows}


def size_text(n):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n // scale} {unit}"
    return f"{n} B"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ddprun", required=True)
    parser.add_argument("--allreduce-bench", required=True)
    parser.add_argument("--python", default="/usr/bin/python3", help="the interpreter with torch 1.13")
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--min-bytes", type=int, default=1 << 10)
    parser.add_argument("--max-bytes", type=int, default=256 << 20)
    parser.add_argument("--repeats", type=int, default=3)
    bench_json.add_option(parser)
    args = parser.parse_args()
    bench_json.record(args, "allreduce")
    ddprun = os.path.abspath(args.ddprun)
    impls = {"ddprun": [os.path.abspath(args.allreduce_bench)],
             "torch": [args.python, TORCH_BENCH]}
    sizes = (args.min_bytes, args.max_bytes)

    print(f"All-reduce benchmark, {datetime.date.today()}, {platform.node()}, {os.cpu_count()} CPUs, "
          f"float32 sum in place, busbw in GB/s, median of {args.repeats} alternating runs")
    for ranks in args.ranks:
        samples = {name: [] for name in impls}
        for rep in range(args.repeats):
            order = list(impls) if rep % 2 == 0 else list(reversed(impls))
            for name in order:
                samples[name].append(run(ddprun, ranks, impls[name], sizes))
                print(f"  {ranks} ranks, run {rep + 1}: {name} done", file=sys.stderr)
        print()
        print(f"{ranks} ranks:")
        print()
        print("| size | ddprun runtime (gloo) | torch 1.13 gloo | ddprun vs torch |")
        print("|---|---|---|---|")
        for size in sorted(samples["ddprun"][0]):
            ours = statistics.median(run[size] for run in samples["ddprun"])
            theirs = statistics.median(run[size] for run in samples["torch"])
            print(f"| {size_text(size)} | {ours:.4f} | {theirs:.4f} | **{ours / theirs:.2f}x** |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
