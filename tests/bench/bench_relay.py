#!/usr/bin/python3
"""What the token costs: ddprun-rendezvous without a token, with one (clients prove it
themselves, as ddprun's agents do), through the loopback relay (unmodified workers under a token),
and handed off by it (the load generator runs with the relay's handoff shim preloaded, as the
agent runs its Python workers under a token), side by side in one run.

Every figure is the median of alternating runs of the same load generator (ddprun-store-bench,
torch 2.x dialect). The relay runs inside the load generator's process on its own thread, as it
runs inside the agent on the workers' node: on 2 cores it competes with the clients for CPU,
as it would there.

Usage: bench_relay.py --bench ddprun-store-bench --daemon ddprun-rendezvous [--shim SO] [--repeats N]
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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bench", required=True)
    parser.add_argument("--daemon", required=True)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--shim", help="the relay's handoff shim (default: <build>/launcher/ of --bench)")
    bench_json.add_option(parser)
    args = parser.parse_args()
    bench_json.record(args, "relay")
    shim = os.path.abspath(args.shim or os.path.join(os.path.dirname(args.bench), "..", "..",
                                                     "launcher", "libddprun-relay-handoff.so"))
    if not os.path.isfile(shim):
        raise SystemExit(f"bench_relay.py: no handoff shim at {shim}; build the project or give --shim")

    workdir = tempfile.mkdtemp(prefix="ddprun-bench-relay-")
    token = os.path.join(workdir, "token")
    with open(os.open(token, os.O_WRONLY | os.O_CREAT, 0o600), "w") as out:
        out.write(os.urandom(32).hex() + "\n")
    certificate = os.path.join(workdir, "store.crt")
    key = os.path.join(workdir, "store.key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                    "-nodes", "-keyout", key, "-out", certificate, "-days", "1", "-subj", "/CN=bench"],
                   check=True, capture_output=True, timeout=60)
    plain = Server("plain", [args.daemon, "--port", "0", "--log-level", "warn"])
    guarded = Server("token", [args.daemon, "--port", "0", "--log-level", "warn",
                               "--token-file", token])
    private = Server("tls", [args.daemon, "--port", "0", "--log-level", "warn",
                             "--token-file", token, "--tls-cert", certificate, "--tls-key", key])
    # name -> (server, extra load-generator arguments)
    setups = {
        "direct": (plain, []),
        "token": (guarded, ["--token-file", token]),
        "tls": (private, ["--token-file", token, "--tls-cert", certificate]),
        "relay": (guarded, ["--relay-token-file", token]),
        "relay-tls": (private, ["--relay-token-file", token, "--tls-cert", certificate]),
        "handoff": (guarded, ["--relay-token-file", token, "--relay-handoff"]),
        "floor": (plain, ["--floor-proxy"]),
    }
    columns = ("direct", "token", "tls", "relay", "relay-tls", "handoff", "floor")

    def run(setup, load):
        server, extra = setups[setup]
        env = dict(os.environ, LD_PRELOAD=shim) if setup == "handoff" else None
        out = subprocess.run([args.bench, "--port", str(server.port), "--dialect", "torch2",
                              *load, *extra], capture_output=True, text=True, timeout=900, env=env)
        if out.returncode != 0:
            raise SystemExit(f"bench failed ({setup}): {out.stderr.strip()}")
        return json.loads(out.stdout.strip().splitlines()[-1])

    def median(names, load):
        return medians(names, args.repeats, lambda name: run(name, load))

    rows = []
    try:
        for engine, names in (("threads", list(columns)),
                              ("evented", ["direct", "relay", "relay-tls", "handoff", "floor"])):
            for clients, rounds in ((1, 3000), (16, 1000)):
                r = median(names, ["--mode", "ops", "--engine", engine, "--clients", str(clients),
                                   "--rounds", str(rounds)])
                cells = [f"{r[n]['ops_per_s']:,.0f} ({r[n]['p50_us']:.0f} / {r[n]['p99_us']:.0f} us)"
                         if n in r else "-" for n in columns]
                ratio = r["direct"]["ops_per_s"] / r["relay"]["ops_per_s"]
                floor = r["direct"]["ops_per_s"] / r["floor"]["ops_per_s"]
                handed = r["direct"]["ops_per_s"] / r["handoff"]["ops_per_s"]
                rows.append((f"set/get/add ops/s (p50 / p99), {clients} client{'s' * (clients > 1)}, "
                             f"{engine}", *cells,
                             f"**{ratio:.2f}x** (floor {floor:.2f}x; handed off {handed:.2f}x)"))
        for engine, names in (("threads", list(columns)),
                              ("evented", ["direct", "relay", "relay-tls", "handoff", "floor"])):
            r = median(names, ["--mode", "barrier", "--engine", engine, "--clients", "1024"])
            cells = [f"{r[n]['seconds']:.3f}" if n in r else "-" for n in columns]
            ratio = r["relay"]["seconds"] / r["direct"]["seconds"]
            floor = r["floor"]["seconds"] / r["direct"]["seconds"]
            handed = r["handoff"]["seconds"] / r["direct"]["seconds"]
            rows.append((f"init barrier (connect, add, wait), 1,024 connections, {engine}: s",
                         *cells, f"**{ratio:.2f}x** (floor {floor:.2f}x; handed off {handed:.2f}x)"))
    finally:
        plain.stop()
        guarded.stop()
        private.stop()

    print(f"Relay benchmark, {datetime.date.today()}, {platform.node()}, {os.cpu_count()} CPUs, "
          f"median of {args.repeats} alternating runs per figure")
    print()
    print("| measurement | no token, direct | token, client proves it | token + TLS, client | "
          "token, through the relay | token + TLS, through the relay | token, handed off by the "
          "relay | no token, minimal proxy (the floor of a user-space hop) | relay vs no token (the "
          "floor's cost; handed off) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
