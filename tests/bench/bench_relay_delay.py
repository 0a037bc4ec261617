#!/usr/bin/python3
"""The relay where it matters: workers on one host, the store on another, a network between them.

Two network namespaces: "node" (the load generator, i.e. the workers, and the relay an agent runs
for them on 127.0.0.1) and "store" (ddprun-rendezvous), joined by ddprun-delay-forwarder
(delay_forwarder.cc): a point-to-point IP link of two TUN devices whose every packet (SYNs, data,
ACKs) arrives a one-way delay D after it left. Direct access and the relay's upstream cross the
same link:

  direct   worker -> link (D) -> store, no token (what torch offers)
  token    worker -> link (D) -> store, the worker proves the token itself (ddprun's agents)
  relay    worker -> relay on node's 127.0.0.1 -> link (D) -> store, the relay proves the token
           (unmodified workers under a token: what the relay's port serves)
  handoff  worker -> link (D) -> store on a connection the relay made and proved the token on, then
           handed to the worker (the load generator runs with the relay's handoff shim preloaded:
           what the agent does for its Python workers under a token)

For each D (0.1, 0.5 and 2 ms by default), 1 and 16 clients, the same load generator
(ddprun-store-bench, threads engine, torch 2.x dialect, set/get/add), medians of alternating runs;
the ratios are direct ops/s over relay (and handoff) ops/s, and, less moved by a neighbour's
burst, their median latency over direct's. And once per D, the time 16 clients take to open
their connections, add to a counter and wait for all (the init barrier).

Needs root (network namespaces); without it, prints one "skipped:" line and exits 0.

Usage: bench_relay_delay.py --bench ddprun-store-bench --daemon ddprun-rendezvous
                            --forwarder ddprun-delay-forwarder [--shim libddprun-relay-handoff.so]
                            [--delays-ms 0.1,0.5,2] [--repeats N]
(--shim: by default the one the build wrote beside ddprun, <build>/launcher/.)
"""
import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from alternating_runs import medians  # noqa: E402
from bench_store import Server  # noqa: E402
import bench_json  # noqa: E402  (--json: the printed tables as one document)
from jobs import Job, give_up  # noqa: E402

NODE_ADDRESS, STORE_ADDRESS = "10.251.0.1", "10.251.0.2"
# Each run of the load generator lasts about this long, whatever the delay (rounds scale with it).
RUN_SECONDS = 0.7


def ip(*args):
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


class Hosts:
    """The namespaces "node" and "store", deleted on close; link(delay) joins them."""

    def __init__(self):
        tag = f"ddprd{os.getpid()}"
        self.node, self.store = f"{tag}n", f"{tag}s"
        self.made = []
        for ns in (self.node, self.store):
            ip("netns", "add", ns)
            self.made.append(ns)
            ip("-n", ns, "link", "set", "lo", "up")

    def link(self, forwarder, delay_us):
        """Starts a forwarder (its TUN devices go when it stops) and addresses its ends."""
        job = Job([forwarder, self.node, self.store, str(delay_us)], name=f"link {delay_us} us")
        line = job.read_line(30) or ""
        if line.strip() != "ready":
            give_up(f"the delay forwarder did not start: {line!r}", [job])
        for ns, mine, peer in ((self.node, NODE_ADDRESS, STORE_ADDRESS),
                               (self.store, STORE_ADDRESS, NODE_ADDRESS)):
            ip("-n", ns, "addr", "add", mine, "peer", peer, "dev", "dly0")
            ip("-n", ns, "link", "set", "dly0", "up")
        return job

    def run_in(self, ns, argv):
        return ["ip", "netns", "exec", ns, *argv]

    def close(self):
        for ns in reversed(self.made):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


def can_make_namespaces():
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    probe = f"ddprdprobe{os.getpid()}"
    out = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        return f"cannot make a network namespace: {out.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=30)
    return None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bench", required=True)
    parser.add_argument("--daemon", required=True)
    parser.add_argument("--forwarder", required=True)
    parser.add_argument("--shim", help="the relay's handoff shim (default: <build>/launcher/ of --bench)")
    parser.add_argument("--delays-ms", default="0.1,0.5,2")
    parser.add_argument("--repeats", type=int, default=3)
    bench_json.add_option(parser)
    args = parser.parse_args()
    bench_json.record(args, "relay-delay")
    delays = [float(d) for d in args.delays_ms.split(",")]
    shim = os.path.abspath(args.shim or os.path.join(os.path.dirname(args.bench), "..", "..",
                                                     "launcher", "libddprun-relay-handoff.so"))
    if not os.path.isfile(shim):
        raise SystemExit(f"bench_relay_delay.py: no handoff shim at {shim}; build the project or give --shim")

    why_not = can_make_namespaces()
    if why_not:
        print(f"skipped: the relay-over-a-delayed-link benchmark {why_not}; run it as root")
        return

    workdir = tempfile.mkdtemp(prefix="ddprun-bench-relay-delay-")
    token = os.path.join(workdir, "token")
    with open(os.open(token, os.O_WRONLY | os.O_CREAT, 0o600), "w") as out:
        out.write(os.urandom(32).hex() + "\n")

    hosts = Hosts()
    running = []
    links = []
    rows = []
    try:
        def start(name, ns, argv):
            server = Server(name, hosts.run_in(ns, argv))
            running.append(server)
            return server

        # Every address of the namespace: the link's own address comes and goes with its forwarder.
        daemon = [args.daemon, "--host", "0.0.0.0", "--port", "0", "--log-level", "warn"]
        plain = start("plain", hosts.store, daemon)
        guarded = start("token", hosts.store, [*daemon, "--token-file", token])
        for delay in delays:
            delay_us = int(round(delay * 1000))
            link = hosts.link(args.forwarder, delay_us)
            links.append(link)
            setups = {"direct": (plain, []),
                      "token": (guarded, ["--token-file", token]),
                      "relay": (guarded, ["--relay-token-file", token]),
                      "handoff": (guarded, ["--relay-token-file", token, "--relay-handoff"])}
            # A set/get/add round is three round trips of 2 x delay, plus ~0.1 ms of the hosts' own.
            rounds = max(30, min(2000, int(RUN_SECONDS * 1e6 / (3 * (2 * delay_us + 100)))))

            def run(setup, clients, mode="ops"):
                server, extra = setups[setup]
                argv = [args.bench, "--host", STORE_ADDRESS, "--port", str(server.port),
                        "--dialect", "torch2", "--mode", mode, "--engine", "threads",
                        "--clients", str(clients), "--rounds", str(rounds), *extra]
                env = dict(os.environ, LD_PRELOAD=shim) if setup == "handoff" else None
                out = subprocess.run(hosts.run_in(hosts.node, argv), capture_output=True,
                                     text=True, timeout=300, env=env)
                if out.returncode != 0:
                    raise SystemExit(f"bench failed ({setup}, {delay} ms): {out.stderr.strip()}")
                return json.loads(out.stdout.strip().splitlines()[-1])

            for clients in (1, 16):
                r = medians(list(setups), args.repeats, lambda name: run(name, clients))
                cells = [f"{r[n]['ops_per_s']:,.0f} ({r[n]['p50_us']:.0f} / {r[n]['p99_us']:.0f} us)"
                         for n in setups]
                against = [f"**{r['direct']['ops_per_s'] / r[n]['ops_per_s']:.3f}x** "
                           f"({r[n]['p50_us'] / r['direct']['p50_us']:.3f}x)" for n in ("relay", "handoff")]
                rows.append((f"{delay:g} ms", f"set/get/add, {clients}", *cells, *against))
            # What a worker's store connection costs to open: connect (and, with a token, its
            # round trip of hello and challenge), then one add and a wait for the others.
            r = medians(list(setups), args.repeats, lambda name: run(name, 16, "barrier"))
            cells = [f"{r[n]['seconds'] * 1000:.1f} ms" for n in setups]
            against = [f"{r[n]['seconds'] / r['direct']['seconds']:.3f}x" for n in ("relay", "handoff")]
            rows.append((f"{delay:g} ms", "connect + add + wait, 16", *cells, *against))
            link.kill()
            links.remove(link)
    finally:
        for server in running:
            server.stop()
        for link in links:
            link.kill()
        hosts.close()

    print(f"Relay across a delayed link, {datetime.date.today()}, {platform.node()}, "
          f"{os.cpu_count()} CPUs, median of {args.repeats} alternating runs per figure")
    print()
    print("| one-way delay | load, clients | no token, direct: ops/s (p50 / p99) or time | token, "
          "client proves it | token, through the relay | token, handed off | relay vs direct: ops/s x "
          "(p50 x), or time x | handoff vs direct |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
