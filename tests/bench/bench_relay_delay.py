#!/usr/bin/python3
"""The relay where it matters: workers on one host, the store on another, a network between them.

Three network namespaces: "node" (the load generator, i.e. the workers, and the relay an agent
runs for them on 127.0.0.1), "store" (ddprun-rendezvous) and between them "link", where
ddprun-delay-forwarder (delay_forwarder.cc) hands every chunk on after a one-way delay D, each way.
The store is reached at the forwarder's address, so direct access and the relay's upstream cross
the same delayed path:

  direct   worker -> link (D) -> store, no token (what torch offers)
  token    worker -> link (D) -> store, the worker proves the token itself (ddprun's agents)
  relay    worker -> relay on node's 127.0.0.1 -> link (D) -> store, the relay proves the token
           (what unmodified PyTorch workers do under a token)

For each D (0.1, 0.5 and 2 ms by default), 1 and 16 clients, the same load generator
(ddprun-store-bench, threads engine, torch 2.x dialect, set/get/add), medians of alternating runs;
the ratio is direct ops/s over relay ops/s.

Needs root (network namespaces); without it, prints one "skipped:" line and exits 0.

Usage: bench_relay_delay.py --bench ddprun-store-bench --daemon ddprun-rendezvous
                            --forwarder ddprun-delay-forwarder [--delays-ms 0.1,0.5,2] [--repeats N]
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

NODE_ADDRESS, LINK_NODE_SIDE = "10.251.1.1", "10.251.1.2"
LINK_STORE_SIDE, STORE_ADDRESS = "10.251.2.1", "10.251.2.2"
# Each run of the load generator lasts about this long, whatever the delay (rounds scale with it).
RUN_SECONDS = 0.7


def ip(*args):
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


class Hosts:
    """node <-veth-> link <-veth-> store, deleted on close."""

    def __init__(self):
        tag = f"ddprd{os.getpid()}"
        self.node, self.link, self.store = f"{tag}n", f"{tag}l", f"{tag}s"
        self.made = []
        for ns in (self.node, self.link, self.store):
            ip("netns", "add", ns)
            self.made.append(ns)
            ip("-n", ns, "link", "set", "lo", "up")
        ip("link", "add", "n0", "netns", self.node, "type", "veth", "peer", "name", "l0",
           "netns", self.link)
        ip("link", "add", "l1", "netns", self.link, "type", "veth", "peer", "name", "s0",
           "netns", self.store)
        for ns, dev, address in ((self.node, "n0", NODE_ADDRESS), (self.link, "l0", LINK_NODE_SIDE),
                                 (self.link, "l1", LINK_STORE_SIDE),
                                 (self.store, "s0", STORE_ADDRESS)):
            ip("-n", ns, "addr", "add", f"{address}/24", "dev", dev)
            ip("-n", ns, "link", "set", dev, "up")

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
    parser.add_argument("--delays-ms", default="0.1,0.5,2")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    delays = [float(d) for d in args.delays_ms.split(",")]

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
    rows = []
    try:
        def start(name, ns, argv):
            server = Server(name, hosts.run_in(ns, argv))
            running.append(server)
            return server

        daemon = [args.daemon, "--host", STORE_ADDRESS, "--port", "0", "--log-level", "warn"]
        plain = start("plain", hosts.store, daemon)
        guarded = start("token", hosts.store, [*daemon, "--token-file", token])
        for delay in delays:
            delay_us = int(round(delay * 1000))
            # One forwarder per store and delay, in the link namespace.
            to_plain = start(f"link to plain {delay} ms", hosts.link,
                             [args.forwarder, LINK_NODE_SIDE, STORE_ADDRESS, str(plain.port),
                              str(delay_us)])
            to_guarded = start(f"link to token {delay} ms", hosts.link,
                               [args.forwarder, LINK_NODE_SIDE, STORE_ADDRESS, str(guarded.port),
                                str(delay_us)])
            setups = {"direct": (to_plain, []),
                      "token": (to_guarded, ["--token-file", token]),
                      "relay": (to_guarded, ["--relay-token-file", token])}
            # A set/get/add round is three round trips of 2 x delay, plus ~0.1 ms of the hosts' own.
            rounds = max(30, min(2000, int(RUN_SECONDS * 1e6 / (3 * (2 * delay_us + 100)))))

            def run(setup, clients):
                forwarder, extra = setups[setup]
                argv = [args.bench, "--host", LINK_NODE_SIDE, "--port", str(forwarder.port),
                        "--dialect", "torch2", "--mode", "ops", "--engine", "threads",
                        "--clients", str(clients), "--rounds", str(rounds), *extra]
                out = subprocess.run(hosts.run_in(hosts.node, argv), capture_output=True,
                                     text=True, timeout=300)
                if out.returncode != 0:
                    raise SystemExit(f"bench failed ({setup}, {delay} ms): {out.stderr.strip()}")
                return json.loads(out.stdout.strip().splitlines()[-1])

            for clients in (1, 16):
                r = medians(list(setups), args.repeats, lambda name: run(name, clients))
                cells = [f"{r[n]['ops_per_s']:,.0f} ({r[n]['p50_us']:.0f} / {r[n]['p99_us']:.0f} us)"
                         for n in setups]
                ratio = r["direct"]["ops_per_s"] / r["relay"]["ops_per_s"]
                rows.append((f"{delay:g} ms", str(clients), *cells, f"**{ratio:.3f}x**"))
            to_plain.stop()
            to_guarded.stop()
            running.remove(to_plain)
            running.remove(to_guarded)
    finally:
        for server in running:
            server.stop()
        hosts.close()

    print(f"Relay across a delayed link, {datetime.date.today()}, {platform.node()}, "
          f"{os.cpu_count()} CPUs, median of {args.repeats} alternating runs per figure")
    print()
    print("| one-way delay | clients | no token, direct: ops/s (p50 / p99) | token, client proves "
          "it | token, through the relay | direct vs relay |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
