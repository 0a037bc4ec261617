#!/usr/bin/python3
"""Side-by-side benchmark of ddprun-rendezvous against torch 1.13's TCPStore server.

Both servers are started by this script and driven, one after the other and alternating per
measurement, by the same C++ client (ddprun-store-bench, torch 1.13 wire dialect, which torch's
server requires). Prints a markdown table with the ratio of each figure.

  bench_store.py --bench BUILD/tests/bench/ddprun-store-bench --daemon BUILD/rendezvous/ddprun-rendezvous
"""
import argparse
import datetime
import json
import os
import platform
import signal
import subprocess
import sys
import time

TORCH_PYTHON = "/usr/bin/python3"
TORCH_SERVER = """
import datetime, sys, torch.distributed as dist
s = dist.TCPStore("127.0.0.1", 0, None, True, datetime.timedelta(seconds=300), wait_for_workers=False)
print("listening on 127.0.0.1:%d" % s.port, flush=True)
sys.stdin.read()
"""


class Server:
    def __init__(self, name, argv, stdin=None):
        self.name = name
        self.process = subprocess.Popen(argv, stdin=stdin, stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, text=True)
        line = self.process.stdout.readline().strip()
        if not line.startswith("listening on "):
            raise SystemExit(f"{name} did not start: {line!r}")
        self.port = int(line.rsplit(":", 1)[1])

    def rss_mib(self, field="VmRSS"):
        with open(f"/proc/{self.process.pid}/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
        return 0.0

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()


def start_servers(daemon):
    ddprun = Server("ddprun-rendezvous", [daemon, "--port", "0", "--log-level", "warn"])
    torch = Server("torch 1.13 TCPStore", [TORCH_PYTHON, "-c", TORCH_SERVER], stdin=subprocess.PIPE)
    return ddprun, torch


def run(bench, port, *args):
    out = subprocess.run([bench, "--port", str(port), "--dialect", "torch113", *args],
                         capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"bench failed: {out.stderr.strip()}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def best_of(repeats, measure, key, better):
    results = [measure() for _ in range(repeats)]
    return better(results, key=lambda r: r[key])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bench", required=True)
    parser.add_argument("--daemon", required=True)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    servers = start_servers(args.daemon)
    ddprun, torch = servers
    rss_idle = {s.name: s.rss_mib() for s in servers}
    rows = []
    try:
        for clients, rounds in ((1, 3000), (16, 600), (256, 60)):
            result = {}
            for s in servers:
                result[s.name] = best_of(args.repeats, lambda: run(args.bench, s.port, "--mode", "ops",
                                                                    "--clients", str(clients),
                                                                    "--rounds", str(rounds)),
                                         "ops_per_s", max)
            d, t = result[ddprun.name], result[torch.name]
            rows.append((f"set/get/add, {clients} client{'s' if clients > 1 else ''}: ops/s",
                         f"{d['ops_per_s']:,.0f}", f"{t['ops_per_s']:,.0f}",
                         f"{d['ops_per_s'] / t['ops_per_s']:.2f}x"))
            rows.append((f"  p50 / p99 per op (us)", f"{d['p50_us']:.0f} / {d['p99_us']:.0f}",
                         f"{t['p50_us']:.0f} / {t['p99_us']:.0f}", ""))
        for clients in (1024, 4096):
            result = {}
            for s in servers:
                result[s.name] = best_of(args.repeats, lambda: run(args.bench, s.port, "--mode",
                                                                    "barrier", "--clients",
                                                                    str(clients)),
                                         "seconds", min)
            d, t = result[ddprun.name], result[torch.name]
            rows.append((f"init barrier, {clients} connections: seconds", f"{d['seconds']:.3f}",
                         f"{t['seconds']:.3f}", f"{t['seconds'] / d['seconds']:.1f}x faster"))
        result = {}
        for s in servers:
            result[s.name] = run(args.bench, s.port, "--mode", "idle", "--idle", "2000",
                                 "--rounds", "2000")
        d, t = result[ddprun.name], result[torch.name]
        rows.append(("add p50 with 2,000 idle connections open: slowdown",
                     f"{d['slowdown']:.2f}x ({d['p50_us_before']:.0f} -> {d['p50_us_with']:.0f} us)",
                     f"{t['slowdown']:.2f}x ({t['p50_us_before']:.0f} -> {t['p50_us_with']:.0f} us)",
                     ""))
        rows.append(("server RSS idle / peak (MiB)",
                     f"{rss_idle[ddprun.name]:.1f} / {ddprun.rss_mib('VmHWM'):.1f}",
                     f"{rss_idle[torch.name]:.1f} / {torch.rss_mib('VmHWM'):.1f}", ""))
    finally:
        for s in servers:
            s.stop()

    print(f"Store benchmark, {datetime.date.today()}, {platform.node()}, {os.cpu_count()} CPUs, "
          f"best of {args.repeats} per figure; client: ddprun TcpStore, torch-1.13 dialect")
    print()
    print("| measurement | ddprun-rendezvous | torch 1.13 TCPStore | ratio |")
    print("|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
