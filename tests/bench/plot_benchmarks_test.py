#!/usr/bin/python3
"""scripts/plot_benchmarks.py keeps drawing: tiny printed bench tables (the form bench_launcher,
bench_store, bench_relay and bench_scale print) go through bench_json into JSON documents, and the
plot script turns them into PNGs; a missing document is one "skipped" line, not a failure.

Exits 77 (skipped) where matplotlib is not installed (scripts/install-deps.sh installs it).

Usage: plot_benchmarks_test.py [REPO]
"""
import json
import os
import subprocess
import sys
import tempfile

REPO = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                       os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "bench"))
import bench_json  # noqa: E402

LAUNCHER = """Launcher benchmark, 2026-11-26, vm, 2 CPUs, median of 3 alternating runs per figure

| measurement | ddprun | anchor | ddprun vs anchor |
|---|---|---|---|
| launch 8 no-op workers, wall (vs the floor: posix_spawn 8 `true`, wait) | 21.5 ms | 6.4 ms | **3.36x the floor** |
| `ddprun --version`, wall (vs the floor) | 6.1 ms | 6.4 ms |  |
| launch 8 no-op workers, wall (vs torchrun 1.13 (monitor 0.1 s, 2.x's default)) | 21.5 ms | 1482 ms | **69x faster** |
| launcher peak RSS (vs torchrun 1.13 (monitor 0.1 s, 2.x's default)) | 8.5 MiB | 60.1 MiB | 7.07x |
| worker death -> all new workers running, one node, 4 workers (vs torchrun 1.13 (monitor 0.1 s, 2.x's default)) | 35.0 ms | 1700 ms | **49x faster** |
| worker death -> all new workers running, two nodes x 2 workers (vs torchrun 1.13 (monitor 0.1 s, 2.x's default)) | 60.0 ms | 2900 ms | **48x faster** |
"""
STORE = """Store benchmark, 2026-11-26, vm, 2 CPUs, median of 3 alternating runs per figure

| measurement | ddprun-rendezvous | torch 1.13 TCPStore | torch 2.6 TCPStore | ddprun vs torch |
|---|---|---|---|---|
| set/get/add ops/s, 1 client, threads | 30,000 | 20,000 | 18,000 | **1.50x** |
| &nbsp;&nbsp;p50 / p99 latency per request (us) | 30 / 60 | 45 / 90 | 50 / 95 | |
| set/get/add ops/s, 16 clients, threads | 60,000 | 35,000 | 30,000 | **1.71x** |
| set/get/add ops/s, 256 clients, threads | 55,000 | 30,000 | 29,000 | **1.83x** |
"""
RELAY = """Relay, by one-way delay

| one-way delay | direct, ops/s | relay, ops/s | relay vs direct |
|---|---|---|---|
| 0.1 ms | 2,300 | 2,200 | **1.05x** |
| 0.5 ms | 950 | 930 | **1.02x** |
| 2 ms | 245 | 244 | **1.00x** |
"""
RELAY_DELAY = """The relay across a delayed link

| one-way delay | load, clients | no token, direct | token, client proves it | token, through the relay | relay vs direct |
|---|---|---|---|---|---|
| 0.1 ms | set/get/add, 1 | 2,886 (273 / 2575 us) | 2,762 | 2,602 | **1.109x** (1.090x) |
| 0.1 ms | set/get/add, 16 | 26,049 | 25,358 | 23,471 | **1.110x** (1.458x) |
| 2 ms | set/get/add, 1 | 238 | 238 | 237 | **1.004x** (0.999x) |
| 2 ms | set/get/add, 16 | 3,574 | 3,606 | 3,596 | **0.994x** (1.007x) |
"""
SCALE = "\n".join(json.dumps(r) for r in [
    {"backend": "c10d", "nodes": 256, "ok": True, "open_s": 0.1, "form_s": 0.23, "reform_s": 0.30},
    {"backend": "c10d", "nodes": 1024, "ok": True, "open_s": 0.5, "form_s": 2.77, "reform_s": 6.68,
     "replace_ok": True, "replace_s": 1.2, "replace_detect_s": 0.01, "lost_hold_ttl_s": 5.0},
    {"backend": "etcd", "nodes": 64, "ok": True, "open_s": 0.2, "form_s": 4.38, "reform_s": 4.14,
     "replace_ok": True, "replace_s": 7.3, "replace_detect_s": 4.8, "lost_hold_ttl_s": 5.0},
    {"backend": "etcd", "nodes": 256, "ok": False, "first_failure": "no round within 60 s"}]) + "\n"


class Args:
    repeats = 3


def main():
    if subprocess.run(["/usr/bin/python3", "-c", "import matplotlib"], capture_output=True).returncode:
        print("skipped: /usr/bin/python3 has no matplotlib (scripts/install-deps.sh installs python3-matplotlib)")
        return 77
    failures = []
    cell = bench_json.parse_cell("**1,482.5 ms**")
    if (cell.get("value"), cell.get("unit")) != (1482.5, "ms"):
        failures.append(f"parse_cell('**1,482.5 ms**') gave {cell}")
    if bench_json.parse_cell("**69x faster**").get("ratio") != 69:
        failures.append(f"parse_cell('**69x faster**') gave {bench_json.parse_cell('**69x faster**')}")
    span = bench_json.parse_cell("1.90-2.10")
    if (span.get("low"), span.get("high")) != (1.9, 2.1):
        failures.append(f"parse_cell('1.90-2.10') gave {span}")
    with tempfile.TemporaryDirectory(prefix="ddprun-plot-test-") as work:
        results, out = os.path.join(work, "results"), os.path.join(work, "img")
        # A bench as the benches use it: --json, then printing; a bench that fails still leaves
        # what it printed (bench_hang's recover rows come without a header).
        failing = os.path.join(work, "failing.json")
        script = ("import argparse, sys; sys.path.insert(0, sys.argv[1]); import bench_json\n"
                  "p = argparse.ArgumentParser(); p.add_argument('--repeats', type=int, default=3)\n"
                  "bench_json.add_option(p); a = p.parse_args(sys.argv[2:]); bench_json.record(a, 'hang')\n"
                  "print('## recover: hang start -> every worker of the new attempt running (s)')\n"
                  "print('| ddprun --hang-timeout 2 | 2.40 | 2.10-2.90 | 1.00x |')\n"
                  "sys.exit('bench failed half way')\n")
        ran = subprocess.run([sys.executable, "-c", script, os.path.join(REPO, "tests", "bench"),
                              "--json", failing], capture_output=True, text=True, timeout=60)
        if "| ddprun --hang-timeout 2 |" not in ran.stdout:
            failures.append(f"--json swallowed the bench's own output: {ran.stdout!r} {ran.stderr!r}")
        try:
            with open(failing) as f:
                row = json.load(f)["tables"][0]["rows"][0]
            if (row["name"], row["cells"][0].get("value"), row["cells"][1].get("low"),
                    row["cells"][2].get("ratio")) != ("ddprun --hang-timeout 2", 2.4, 2.1, 1.0):
                failures.append(f"the failing bench's row came out as {row}")
        except (OSError, ValueError, LookupError) as error:
            failures.append(f"a bench that exits with an error left no usable --json document: {error!r}")
        for bench, text in (("launcher", LAUNCHER), ("store", STORE), ("relay", RELAY), ("relay-delay", RELAY_DELAY),
                             ("scale", SCALE)):
            bench_json.write(os.path.join(results, f"{bench}.json"), bench, Args, text)
        with open(os.path.join(results, "scale.json")) as f:
            records = json.load(f)["records"]
        if len(records) != 4:
            failures.append(f"scale.json holds {len(records)} records, wanted the 4 JSON lines printed")
        done = subprocess.run(["/usr/bin/python3", os.path.join(REPO, "scripts", "plot_benchmarks.py"),
                               "--results", results, "--out", out], capture_output=True, text=True, timeout=120)
        print(done.stdout + done.stderr)
        if done.returncode != 0:
            failures.append(f"plot_benchmarks.py exited {done.returncode}")
        for name in ("launch", "restart", "store", "relay", "relay-delay", "scale"):
            path = os.path.join(out, f"{name}.png")
            if not os.path.exists(path):
                failures.append(f"{name}.png not written")
                continue
            with open(path, "rb") as f:
                if f.read(8) != b"\x89PNG\r\n\x1a\n":
                    failures.append(f"{name}.png is not a PNG")
        os.remove(os.path.join(results, "relay.json"))
        again = subprocess.run(["/usr/bin/python3", os.path.join(REPO, "scripts", "plot_benchmarks.py"),
                                "--results", results, "--out", out, "relay"], capture_output=True, text=True,
                               timeout=120)
        skipped = [line for line in again.stdout.splitlines() if "relay: skipped" in line]
        if again.returncode != 0 or len(skipped) != 1:
            failures.append(f"a missing relay.json: exit {again.returncode}, wanted one 'skipped' line, saw "
                            f"{again.stdout!r} {again.stderr!r}")
    for failure in failures:
        print(f"FAIL: {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
