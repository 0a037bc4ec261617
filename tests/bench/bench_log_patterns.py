#!/usr/bin/python3
"""What the line patterns and the time in the prefix cost the agent (docs/benchmarks.md, "Patterns
on the output path"): one rank prints 10,000 lines a second (each its own write, as print(...,
flush=True) does, or --lines-per-write in one write) for --seconds; the agent's CPU time (user + system, every thread: /proc/<agent
pid>/stat, read by the worker, its child, when it starts printing and when it stops) under:

  pass-through  no template, no pattern: the worker writes to the agent's own stdout (reference)
  routed        TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE set to the default prefix: every line read,
                prefixed and written by the agent, no pattern
  patterns      routed + --progress-pattern '^step [0-9]+' --start-pattern 'training started'
                --fail-pattern 'loss (nan|inf)' (the start and fail patterns never match, so
                they are tried on every line: the worst case)
  patterns+time the same and --log-time

The agent's stdout goes to /dev/null. Runs alternate between the settings (--runs each); each
figure is min / median / max over the runs.

    bench_log_patterns.py --ddprun build/launcher/ddprun [--seconds 10] [--runs 3] [--cpu 1]
                          [--lines-per-write 1]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

import bench_json  # (--json: the printed tables as one document)

WORKER = r'''
import os, sys, time
out, seconds, rate, burst = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
tick = os.sysconf("SC_CLK_TCK")
def agent_cpu():
    with open("/proc/%d/stat" % os.getppid()) as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / tick  # utime, stime
write = sys.stdout.write
flush = sys.stdout.flush
before = agent_cpu()
start = time.monotonic()
per_ms = rate // 1000
n = 0
while True:
    elapsed = time.monotonic() - start
    if elapsed >= seconds:
        break
    due = int(elapsed * rate)
    while n + burst <= due:
        for _ in range(burst):
            write("step %d loss %.4f lr 0.0001 grad_norm 1.23 time 0.123s\n" % (n, 2.0 / (n + 1)))
            n += 1
        flush()
    time.sleep(0.001)
after = agent_cpu()
took = time.monotonic() - start
with open(out, "w") as result:
    result.write("%f %d %f\n" % (after - before, n, took))
'''

# Every routed setting writes the default prefix, so they differ by the patterns and the time only.
PREFIX = {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "[${role_name}${local_rank}]:"}
PATTERNS = ["--progress-pattern", "^step [0-9]+", "--start-pattern", "training started",
            "--fail-pattern", "loss (nan|inf)"]
SETTINGS = {
    "pass-through": ([], {}),
    "routed": ([], PREFIX),
    "patterns": (PATTERNS, PREFIX),
    "patterns+time": (PATTERNS + ["--log-time"], PREFIX),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ddprun", required=True)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rate", type=int, default=10000)
    parser.add_argument("--lines-per-write", type=int, default=1,
                        help="lines per write(2): 1 as print(..., flush=True); more, as a block-"
                        "buffered stdout, so that each read of the agent takes that many")
    parser.add_argument("--cpu", help="run the agent and the worker on this one CPU (taskset): the "
                        "worker's writes then reach the agent in the same batches every run")
    bench_json.add_option(parser)
    args = parser.parse_args()
    bench_json.record(args, "patterns")
    work = tempfile.mkdtemp(prefix="ddprun-bench-log-patterns-")
    worker = os.path.join(work, "worker.py")
    with open(worker, "w") as out:
        out.write(WORKER)
    results = {name: [] for name in SETTINGS}
    for run in range(args.runs):
        for name, (options, env) in SETTINGS.items():
            out = os.path.join(work, "result")
            environment = dict(os.environ, OMP_NUM_THREADS="1", **env)
            argv = (["taskset", "-c", args.cpu] if args.cpu else []) + [args.ddprun, "--standalone", "--nproc-per-node", "1", *options, "--no-python",
                    sys.executable, worker, out, str(args.seconds), str(args.rate),
                    str(args.lines_per_write)]
            done = subprocess.run(argv, env=environment, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True, timeout=args.seconds + 60)
            if done.returncode != 0:
                sys.exit(f"{name}: exit {done.returncode}\n{done.stderr}")
            with open(out) as result:
                cpu, lines, took = result.read().split()
            results[name].append((float(cpu), int(lines), float(took)))
            print(f"run {run + 1} {name}: agent CPU {float(cpu):.2f} s for {int(lines)} lines "
                  f"in {float(took):.1f} s", flush=True)
    print(f"\nagent CPU time for one rank printing {args.rate} lines/s, {args.lines_per_write} "
          f"per write, for {args.seconds:g} s (min / median / max of {args.runs}):")
    for name, runs in results.items():
        cpus = sorted(cpu for cpu, _, _ in runs)
        lines = statistics.median(n for _, n, _ in runs)
        share = statistics.median(cpu / took for cpu, _, took in runs) * 100
        per_line = statistics.median(cpu / n * 1e6 for cpu, n, _ in runs)
        print(f"  {name:14} {cpus[0]:.2f} / {statistics.median(cpus):.2f} / {cpus[-1]:.2f} s "
              f"({share:.1f}% of one core, {per_line:.2f} us per line, {lines:.0f} lines)")


if __name__ == "__main__":
    main()
