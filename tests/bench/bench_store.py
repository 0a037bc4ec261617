#!/usr/bin/python3
"""Side-by-side benchmark of ddprun-rendezvous against torch 1.13's and torch 2.6's TCPStore servers.

Both servers run at once; every measurement is repeated, alternating which server goes first,
and the median of each is reported with the ratio. The same load generator drives both
(ddprun-store-bench, torch 1.13 wire dialect, which torch's server requires), in two engines:

  threads  one thread and one TcpStore (ddprun's C++ client) per client: what a worker sees;
           on 2 cores the client threads' own cost dominates and compresses every ratio
  evented  one thread drives every connection (as redis-benchmark does): the server's capacity

The first table (the "ladder") runs the threads engine at 1, 4, 16, 64 and 256 clients against
ddprun-rendezvous, torch 1.13's server and the floor store (ddprun-store-bench --serve-floor: one
edge-triggered epoll loop, one recv and one send per request, nothing else), in the torch 1.13
dialect, then the same against torch 2.6's server (its classic backend: the chroot's torch has no
libuv) in the 2.x dialect, which is the only one that server accepts. With `perf` it also counts
each server's system calls and context switches per op.

Usage: bench_store.py --bench ddprun-store-bench --daemon ddprun-rendezvous [--repeats N]
                      [--ladder-only] [--ladder-clients 1,16,256] [--same-cpu]
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
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TORCH2_PYTHON = os.path.join(REPO, "scripts", "torch2-python")
# torch 2.6's classic server (use_libuv=False): Debian's torch 2.6 is built without libuv.
TORCH2_SERVER = """
import datetime, sys, torch.distributed as dist
s = dist.TCPStore("127.0.0.1", 0, None, True, datetime.timedelta(seconds=300), wait_for_workers=False,
                  use_libuv=False)
print("listening on 127.0.0.1:%d" % s.port, flush=True)
sys.stdin.read()
"""
LADDER = (1, 4, 16, 64, 256)
# What perf counts in a server while the load runs: the system calls it makes and how often it
# sleeps and is woken, per op.
PERF_EVENTS = ("raw_syscalls:sys_enter", "context-switches")
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


def perf_works():
    """Whether `perf stat` can count the tracepoints here (a tool, a kernel and a permission)."""
    try:
        return subprocess.run(["perf", "stat", "-x,", "-e", ",".join(PERF_EVENTS), "true"],
                              capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


class Bench:
    def __init__(self, binary, servers, repeats, count=False, prefix=()):
        self.binary = binary
        self.servers = servers
        self.repeats = repeats
        self.count = count  # perf stat each server while it is measured
        self.prefix = list(prefix)  # before the generator's command line (taskset)

    def run(self, server, args, dialect="torch113"):
        cpu_before = server.cpu_seconds()
        perf = None
        if self.count:
            perf = subprocess.Popen(["perf", "stat", "-x,", "-p", str(server.process.pid), "-e",
                                     ",".join(PERF_EVENTS)], stderr=subprocess.PIPE, text=True)
        try:
            out = subprocess.run([*self.prefix, self.binary, "--port", str(server.port), "--dialect", dialect,
                                  *args], capture_output=True, text=True, timeout=900)
        finally:
            counts = {}
            if perf is not None:
                perf.send_signal(signal.SIGINT)
                for line in perf.communicate(timeout=30)[1].splitlines():
                    fields = line.split(",")
                    if len(fields) > 2 and fields[0].replace(".", "").isdigit():
                        counts[fields[2]] = float(fields[0])
        if out.returncode != 0:
            raise SystemExit(f"bench failed against {server.name}: {out.stderr.strip()}")
        result = json.loads(out.stdout.strip().splitlines()[-1])
        if "ops" in result:
            # What the server itself spent per op: independent of how much CPU the load
            # generator leaves it on a 2-core machine.
            result["server_cpu_us"] = (server.cpu_seconds() - cpu_before) * 1e6 / result["ops"]
            if PERF_EVENTS[0] in counts:
                result["syscalls_per_op"] = counts[PERF_EVENTS[0]] / result["ops"]
                result["switches_per_op"] = counts[PERF_EVENTS[1]] / result["ops"]
        return result

    def median(self, args, key):
        """Median of `key` per server over the repeats, alternating the order of the servers."""
        return medians(self.servers, self.repeats, lambda server: self.run(server, args))


def ladder(args):
    """The threads engine at every connection count: ddprun, torch 1.13 and the floor in the 1.13
    dialect, ddprun, torch 2.6 and the floor in the 2.x dialect; one table of markdown rows."""
    ddprun = Server("ddprun", [args.daemon, "--port", "0", "--log-level", "warn"])
    floor = Server("floor", [args.bench, "--serve-floor"])
    torch113 = Server("torch113", [TORCH_PYTHON, "-c", TORCH_SERVER], stdin=subprocess.PIPE)
    servers = [ddprun, floor, torch113]
    torch2 = None
    if os.path.exists(TORCH2_PYTHON) and os.geteuid() == 0:
        torch2 = Server("torch26", [TORCH2_PYTHON, "-c", TORCH2_SERVER], stdin=subprocess.PIPE)
        servers.append(torch2)
    else:
        print("bench_store: no torch 2.6 column (scripts/torch2-python needs root and its chroot)",
              file=sys.stderr)
    count = perf_works()
    prefix = []
    if args.same_cpu:
        # Every thread of every server and of the generator on CPU 0: no wake-up crosses vCPUs,
        # whose cost (~13 us on a VM) otherwise decides the 1-client figure by placement alone.
        for server in servers:
            subprocess.run(["taskset", "-a", "-p", "-c", "0", str(server.process.pid)], check=True,
                           stdout=subprocess.DEVNULL)
        prefix = ["taskset", "-c", "0"]
    bench = Bench(args.bench, servers, args.repeats, count=count, prefix=prefix)
    rows = []

    def cell(r, name):
        text = f"{r[name]['ops_per_s']:,.0f} ({r[name]['server_cpu_us']:.1f} us"
        if "syscalls_per_op" in r[name]:
            text += f", {r[name]['syscalls_per_op']:.2f} sc, {r[name]['switches_per_op']:.2f} cs"
        return text + ")"

    try:
        for dialect, torch in (("torch113", torch113), ("torch2", torch2)):
            if torch is None:
                continue
            for clients in args.ladder_clients:
                rounds = max(10, 10000 // clients)
                r = medians([ddprun, torch, floor], args.repeats, lambda server: bench.run(
                    server, ["--mode", "ops", "--engine", "threads", "--clients", str(clients),
                             "--rounds", str(rounds)], dialect))
                d, t, f = r["ddprun"], r[torch.name], r["floor"]
                rows.append((f"{clients}", torch.name, cell(r, "ddprun"), cell(r, torch.name),
                             cell(r, "floor"), f"**{d['ops_per_s'] / t['ops_per_s']:.2f}x**",
                             f"{t['server_cpu_us'] / d['server_cpu_us']:.2f}x less",
                             f"{f['ops_per_s'] / t['ops_per_s']:.2f}x"))
    finally:
        for s in servers:
            s.stop()
    print(f"Store ladder, {datetime.date.today()}, {platform.node()}, {os.cpu_count()} CPUs, "
          f"threads engine (one thread and one connection per client)"
          f"{', every thread on CPU 0' if args.same_cpu else ''}, median of {args.repeats} "
          f"alternating runs per figure; cells: ops/s (server CPU per op"
          f"{', system calls and context switches per op' if count else ''})")
    print()
    print("| clients | against | ddprun-rendezvous | torch's server | floor store | ddprun vs torch, "
          "ops/s | server CPU per op | floor vs torch, ops/s |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bench", required=True)
    parser.add_argument("--daemon", required=True)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--ladder-only", action="store_true",
                        help="only the threads engine at 1-256 clients against both torch servers")
    parser.add_argument("--ladder-clients", type=lambda text: [int(n) for n in text.split(",")],
                        default=list(LADDER), help="the ladder's client counts (default 1,4,16,64,256)")
    parser.add_argument("--same-cpu", action="store_true",
                        help="the ladder with every server and the generator pinned to CPU 0")
    bench_json.add_option(parser)
    args = parser.parse_args()
    bench_json.record(args, "store")

    ladder(args)
    if args.ladder_only:
        return
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
