#!/usr/bin/python3
"""Side-by-side benchmark of ddprun-rendezvous against torch 1.13's TCPStore server.

Both servers run at once; every measurement is repeated, alternating which server goes first,
and the median of each is reported with the ratio. The same load generator drives both
(ddprun-store-bench, torch 1.13 wire dialect, which torch's server requires), in two engines:

  threads  one thread and one TcpStore (ddprun's C++ client) per client: what a worker sees;
           on 2 cores the client threads' own cost dominates and compresses every ratio
  evented  one thread drives every connection (as redis-benchmark does): the server's capacity

Usage: bench_store.py --bench ddprun-store-bench --daemon ddprun-rendezvous [--repeats N]
"""
import argparse
import datetime
import json
import os
import platform
import signal
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from alternating_runs import medians  # noqa: E402
from jobs import Job, give_up  # noqa: E402
import bench_json  # noqa: E402  (--json: the printed tables as one document)

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
        self.job = Job(argv, name=name, stdin=stdin)
        self.process = self.job.proc
        line = self.job.read_line(120) or ""
        if not line.startswith("listening on "):
            give_up(f"{name} did not start: {line!r}", [self.job])
        self.port = int(line.rsplit(":", 1)[1])

    def memory_mib(self, field):
        with open(f"/proc/{self.process.pid}/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
        return 0.0

    def cpu_seconds(self):
        """User + system CPU time the server process has used so far."""
        with open(f"/proc/{self.process.pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()


class Bench:
    def __init__(self, binary, servers, repeats):
        self.binary = binary
        self.servers = servers
        self.repeats = repeats

    def run(self, server, args):
        cpu_before = server.cpu_seconds()
        out = subprocess.run([self.binary, "--port", str(server.port), "--dialect", "torch113",
                              *args], capture_output=True, text=True, timeout=900)
        if out.returncode != 0:
            raise SystemExit(f"bench failed against {server.name}: {out.stderr.strip()}")
        result = json.loads(out.stdout.strip().splitlines()[-1])
        if "ops" in result:
            # What the server itself spent per op: independent of how much CPU the load
            # generator leaves it on a 2-core machine.
            result["server_cpu_us"] = (server.cpu_seconds() - cpu_before) * 1e6 / result["ops"]
        return result

    def median(self, args, key):
        """Median of `key` per server over the repeats, alternating the order of the servers."""
        return medians(self.servers, self.repeats, lambda server: self.run(server, args))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bench", required=True)
    parser.add_argument("--daemon", required=True)
    parser.add_argument("--repeats", type=int, default=5)
    bench_json.add_option(parser)
    args = parser.parse_args()
    bench_json.record(args, "store")

    ddprun = Server("ddprun", [args.daemon, "--port", "0", "--log-level", "warn"])
    torch = Server("torch", [TORCH_PYTHON, "-c", TORCH_SERVER], stdin=subprocess.PIPE)
    servers = [ddprun, torch]
    bench = Bench(args.bench, servers, args.repeats)
    idle_rss = {s.name: s.memory_mib("VmRSS") for s in servers}
    rows = []
    try:
        for engine in ("evented", "threads"):
            for clients, rounds in ((1, 3000), (16, 1000), (256, 100)):
                r = bench.median(["--mode", "ops", "--engine", engine, "--clients", str(clients),
                                  "--rounds", str(rounds)], "ops_per_s")
                d, t = r["ddprun"], r["torch"]
                rows.append((f"set/get/add ops/s, {clients} client{'s' * (clients > 1)}, {engine}",
                             f"{d['ops_per_s']:,.0f}", f"{t['ops_per_s']:,.0f}",
                             f"**{d['ops_per_s'] / t['ops_per_s']:.2f}x**"))
                rows.append(("&nbsp;&nbsp;p50 / p99 latency per request (us)",
                             f"{d['p50_us']:.0f} / {d['p99_us']:.0f}",
                             f"{t['p50_us']:.0f} / {t['p99_us']:.0f}", ""))
                rows.append(("&nbsp;&nbsp;server CPU per op (us)", f"{d['server_cpu_us']:.1f}",
                             f"{t['server_cpu_us']:.1f}",
                             f"{t['server_cpu_us'] / d['server_cpu_us']:.2f}x less"))
        for engine in ("evented", "threads"):
            for clients in (1024, 4096):
                r = bench.median(["--mode", "barrier", "--engine", engine, "--clients",
                                  str(clients)], "seconds")
                d, t = r["ddprun"], r["torch"]
                rows.append((f"init barrier (connect, add, wait), {clients} connections, {engine}: s",
                             f"{d['seconds']:.3f}", f"{t['seconds']:.3f}",
                             f"**{t['seconds'] / d['seconds']:.1f}x faster**"))
        r = bench.median(["--mode", "idle", "--idle", "2000", "--rounds", "2000"], "slowdown")
        d, t = r["ddprun"], r["torch"]
        rows.append(("add p50 before -> with 2,000 idle connections (us)",
                     f"{d['p50_us_before']:.0f} -> {d['p50_us_with']:.0f} "
                     f"(**{d['slowdown']:.2f}x**)",
                     f"{t['p50_us_before']:.0f} -> {t['p50_us_with']:.0f} "
                     f"(**{t['slowdown']:.2f}x**)", ""))
        rows.append(("server RSS: idle / peak (MiB)",
                     f"{idle_rss['ddprun']:.1f} / {ddprun.memory_mib('VmHWM'):.1f}",
                     f"{idle_rss['torch']:.1f} / {torch.memory_mib('VmHWM'):.1f}", ""))
    finally:
        for s in servers:
            s.stop()

    print(f"Store benchmark, {datetime.date.today()}, {platform.node()}, {os.cpu_count()} CPUs, "
          f"median of {args.repeats} alternating runs per figure")
    print()
    print("| measurement | ddprun-rendezvous | torch 1.13 TCPStore | ddprun vs torch |")
    print("|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
