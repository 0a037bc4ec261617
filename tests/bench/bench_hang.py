#!/usr/bin/python3
"""Hangs, side by side in one run (docs/benchmarks.md):

  recover   2 workers on one node; rank 1 hangs; the time from the hang's start to every worker of
            the new attempt running. ddprun --hang-timeout 2 (heartbeats), ddprun serving torch's
            FileTimer (expires(after=2)), torchrun 2.6 and torchrun 1.13 with the same FileTimer.
            ddprun records the hung rank's stacks before the kill: the kernel's view and the
            Python stack always, the native stack within --hang-native-stack-budget (0.4 s by
            default; eu-stack when installed, else gdb, which needs seconds once the worker
            loaded libtorch, as the FileTimer workers have). The "gdb" row forces gdb
            (DDPRUN_HANG_DEBUGGER=gdb) to show the budget cutting it short; the "no native stack"
            row is --hang-native-stack-budget 0. --before BIN adds the rows of an earlier ddprun
            (which waited up to 10 s for gdb) to compare in the same run.
  reports   the agent's CPU per million progress reports: ddprun's heartbeat file, ddprun's and
            torchrun 2.6's FileTimer pipe (each report = acquire + release), and the same loop
            reporting nothing (the floor); plus the worker's own cost per report.

Each figure is the median of --repeats runs.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import bench_json  # (--json: the printed tables as one document)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
PROBE = os.path.join(HERE, "hang_probe.py")
TORCH2 = os.path.join(REPO, "scripts", "torch2-python")
SHARED = os.environ.get("DDPRUN_SHARED", os.path.abspath(os.path.join(REPO, "..", "shared")))
TORCHRUN113 = ["/usr/bin/python3", os.path.join(SHARED, "tools", "torchrun-py311.py")]


def launchers(ddprun, before=None):
    """name -> (argv head, python for the workers, extra environment)."""
    file_timer = {"TORCHELASTIC_ENABLE_FILE_TIMER": "1"}
    table = {
        "ddprun --hang-timeout 2": ([ddprun, "--hang-timeout", "2"], "/usr/bin/python3", {}),
        "ddprun, FileTimer": ([ddprun], "/usr/bin/python3", file_timer),
        "ddprun, FileTimer, gdb within the 0.4 s budget": ([ddprun], "/usr/bin/python3",
                                                           dict(file_timer, DDPRUN_HANG_DEBUGGER="gdb")),
        "ddprun, FileTimer, no native stack": ([ddprun, "--hang-native-stack-budget", "0"],
                                               "/usr/bin/python3", file_timer),
    }
    if before:
        table.update({
            "before: ddprun --hang-timeout 2 (gdb)": ([before, "--hang-timeout", "2"], "/usr/bin/python3", {}),
            "before: ddprun, FileTimer (gdb)": ([before], "/usr/bin/python3", file_timer),
        })
    table.update({
        "torchrun 2.6, FileTimer": ([TORCH2, "-m", "torch.distributed.run"], None, file_timer),
        "torchrun 1.13, FileTimer": (TORCHRUN113, None, file_timer),
    })
    return table


def run(head, python, extra_env, script_args, nproc, timeout=120):
    env = dict(os.environ, **extra_env)
    argv = list(head)
    torchrun = "torch.distributed.run" in head or head == TORCHRUN113
    if python:
        env["PYTHON_EXEC"] = python
    argv += (["--standalone", "--nproc_per_node", str(nproc), "--max_restarts", "1"] if torchrun
             else ["--standalone", "--nproc-per-node", str(nproc), "--max-restarts", "1"])
    argv += [PROBE, *script_args]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)


def recover(name, head, python, env, mode):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "times")
        result = run(head, python, env, ["recover", out, mode], 2)
        text = open(out).read() if os.path.exists(out) else ""
    hang = [float(t) for t in re.findall(r"^hang (\S+)", text, re.M)]
    starts = [float(t) for t in re.findall(r"^start (\S+)", text, re.M)]
    if result.returncode != 0 or len(hang) != 1 or len(starts) != 2:
        sys.exit(f"{name}: exit {result.returncode}, times {text!r}\n{result.stderr[-3000:]}")
    return max(starts) - hang[0]


def reports(name, head, python, env, mode, count):
    """(agent CPU seconds, worker µs per report), or the reason it could not be measured."""
    result = run(head, python, env, ["reports", str(count), mode], 1, timeout=600)
    m = re.search(r"agent_cpu (\S+) worker_us (\S+)", result.stdout)
    if result.returncode == 0 and m:
        return float(m.group(1)), float(m.group(2))
    if "BlockingIOError" in result.stderr:
        # torch's client writes without blocking and its server reads every 0.1 s: a worker that
        # reports faster than that fills the pipe and dies of EAGAIN.
        return "the worker dies of BlockingIOError: the pipe fills between the server's reads"
    sys.exit(f"{name}: exit {result.returncode}\n{result.stdout[-2000:]}{result.stderr[-3000:]}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ddprun", required=True)
    parser.add_argument("--before", help="an earlier ddprun whose recover rows run beside")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--reports", type=int, default=100000,
                        help="FileTimer reports per run; heartbeats: ten times as many")
    parser.add_argument("--only", choices=["recover", "reports"])
    bench_json.add_option(parser)
    args = parser.parse_args()
    bench_json.record(args, "hang")
    table = launchers(args.ddprun, args.before)
    if args.only == "reports":
        table = {}

    if table:
        print("## recover: hang start -> every worker of the new attempt running (s), "
              f"median of {args.repeats}")
    results = {name: [] for name in table}
    for _ in range(args.repeats):
        for name, (head, python, env) in table.items():
            mode = "heartbeat" if "hang-timeout" in name else "filetimer"
            results[name].append(recover(name, head, python, env, mode))
    base = statistics.median(results["ddprun --hang-timeout 2"]) if table else 1
    for name, values in results.items():
        median = statistics.median(values)
        print(f"| {name} | {median:.2f} | {min(values):.2f}-{max(values):.2f} | {median / base:.2f}x |")

    if args.only == "recover":
        return 0
    print(f"\n## reports: the agent's CPU per million reports (median of 3; the worker's own "
          "time per report)")
    ticks = 1 / os.sysconf("SC_CLK_TCK")
    rows = [("ddprun, no reports (floor)", args.ddprun, "none", {}, args.reports * 10),
            ("ddprun, heartbeat (os.utime)", args.ddprun, "heartbeat", {}, args.reports * 10),
            ("ddprun, FileTimer acquire+release", args.ddprun, "filetimer",
             {"TORCHELASTIC_ENABLE_FILE_TIMER": "1"}, args.reports),
            ("torchrun 2.6, FileTimer acquire+release", None, "filetimer",
             {"TORCHELASTIC_ENABLE_FILE_TIMER": "1"}, args.reports)]
    for name, binary, mode, env, count in rows:
        if binary:
            head, python = [binary], "/usr/bin/python3"
        else:
            head, python = [TORCH2, "-m", "torch.distributed.run"], None
        samples = [reports(name, head, python, env, mode, count) for _ in range(3)]
        failed = [s for s in samples if isinstance(s, str)]
        if failed:
            print(f"| {name} | {count} | {failed[0]} | |")
            continue
        cpu = statistics.median(s[0] for s in samples)
        worker = statistics.median(s[1] for s in samples)
        per_million = f"{cpu * 1e6 / count:.3f} s" if cpu > 0 else f"< {ticks * 1e6 / count:.3f} s (0 ticks)"
        print(f"| {name} | {count} | {per_million} | {worker:.2f} µs |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
