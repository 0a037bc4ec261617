#!/usr/bin/env python3
"""Round formation at scale, in simulation (issue #22 point 6; docs/benchmarks.md, "Scale").

For each size N, a fresh store (a ddprun-rendezvous daemon, or one etcd member on loopback with its
data in /dev/shm) and ddprun-scale-sim driving N simulated agents (real Memberships, three store
connections each, no workers; threads of as many processes as their descriptors need, see
AGENTS_PER_PROCESS) against it: the time to open, to form round 0 of N nodes,
and to re-form after one node leaves; the store's CPU seconds per phase and its peak RSS; and the
store operations per node (requests, and keys named), which show whatever grows faster than N.
Output: one JSON line per run (also appended to --json-out), then a table, then a power-law
extrapolation from the two largest sizes to 12,500 nodes (100,000 ranks at 8 per node).

With --spares S (default 1; 0: none), each size also runs the spare scenario on a fresh store
(issue #38 point 5): N active agents at --nnodes N:N plus S spares, each passing the real health
gate's built-in checks before it joins; one active agent is lost as a SIGKILLed agent is (its
connections close, its hold is never released), and `replace` times from the loss until the last
member of the new round, a spare among them, knows it (on etcd the loss shows only when the lost
agent's lease ends: its TTL, keep_alive_interval x --lost-attempts, is in each row). Its figures
join the size's JSON line (replace_*, gate_*, settle_s, lost_hold_ttl_s; replace_ok) and a second
table.

  flock /tmp/ddprun-bench.lock scripts/bench.sh scale [--sizes 256,1024,4096] [--etcd-sizes 256,1024]
      [--etcd /usr/bin/etcd,/path/to/another/etcd] [--spares 1] [--lost-attempts 5] [--lost-slot last]

--etcd names the etcd binaries to run the etcd sizes on, each in its own rows labelled with its
version (`etcd --version`): Debian bookworm's is 3.4, whose member copies its whole buffer of
uncommitted writes for every read (docs/benchmarks.md, "Scale"); a 3.5 binary shows the same job
without that.

A benchmark, never a timed test. Sizes above ~6,000 need more than the usual 20,000 descriptors
in the store (three connections per simulated agent); on etcd, whose member holds one for each of
the agents' connections (about twenty an agent), sizes above ~1,000.
"""
import argparse
import json
import math
import os
import resource
import socket
import subprocess
import sys
import time
import bench_json  # (--json: the printed tables as one document)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from ports import free_port  # noqa: E402
from bench_rendezvous import ETCD, Etcd  # noqa: E402  (one etcd member on loopback, data in /dev/shm)


# Descriptors the simulator may need: 3 per agent on ddprun's store; on etcd about 20 (its client
# opens a connection per concurrent call and per watch), and etcd one for each of them. The hard
# limit here is 20,000, and this VM's root lacks CAP_SYS_RESOURCE to raise it: about 1,000 agents
# on etcd. Where the hard limit can be raised, it is.
WANTED_FDS = 1 << 20
# Simulated agents per simulator process, so that each process's descriptors stay under the
# limit, which binds each process alone: on ddprun's store an agent holds three connections, on
# etcd about twenty (the client's connection per concurrent call and per kept watch), and each
# client its epoll set besides.
AGENTS_PER_PROCESS = {"c10d": 4096, "etcd": 256}


def raise_fd_limit():
    """Children inherit it. With CAP_SYS_RESOURCE the hard limit too (up to fs.nr_open)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        with open("/proc/sys/fs/nr_open") as f:
            ceiling = min(WANTED_FDS, int(f.read()))
    except OSError:
        ceiling = hard
    for limit in (ceiling, hard):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
            return
        except (ValueError, OSError):
            continue


def wait_port(port, process, what, patience=30):
    deadline = time.monotonic() + patience
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode} before listening")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on {port} within {patience} s")


class Daemon:
    """ddprun-rendezvous on loopback, as a job's --rdzv-endpoint."""

    def __init__(self, path):
        self.port = free_port()
        self.process = subprocess.Popen([path, "--host", "127.0.0.1", "--port", str(self.port),
                                         "--log-level", "error"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        start_new_session=True)
        wait_port(self.port, self.process, "ddprun-rendezvous")

    def endpoint(self):
        return f"127.0.0.1:{self.port}"

    def close(self):
        self.process.kill()
        self.process.wait()


def etcd_version(binary):
    """"3.4.23" from `etcd --version` ("etcd Version: 3.4.23"); "?" if it does not say."""
    try:
        text = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    for line in text.splitlines():
        if line.startswith("etcd Version:"):
            return line.split(":", 1)[1].strip()
    return "?"


def store_label(row):
    """The rows' store: "ddprun-rendezvous" for c10d, "etcd <version>" (older records: "etcd")."""
    return row.get("store") or ("ddprun-rendezvous" if row["backend"] == "c10d" else row["backend"])


# The spare scenario's figures that join its size's row (the rest of its line repeats what the
# forming run measures).
SPARE_KEYS = ("spares", "settle_s", "replace_s", "replace_detect_s", "store_cpu_replace_s",
              "sim_cpu_replace_s", "requests_per_node_replace", "keys_per_node_replace",
              "read_bytes_per_node_replace", "lost_group_rank", "seated_group_rank", "spares_seated",
              "keep_alive_interval_s", "lost_hold_ttl_s", "lost_slot", "gate_agents") + tuple(
                  f"gate_{run}_{clock}_ms_{stat}" for run in ("first", "rejoin")
                  for clock in ("cpu", "wall") for stat in ("median", "max"))


def run_one(args, backend, nodes, etcd_binary=None, spares=0):
    store = Etcd(etcd_binary) if backend == "etcd" else Daemon(args.daemon)
    try:
        procs = -(-(nodes + spares) // AGENTS_PER_PROCESS[backend])
        command = [args.sim, "--backend", backend, "--endpoint", store.endpoint(), "--nodes", str(nodes),
                   "--procs", str(procs), "--run-id", f"scale{os.getpid()}n{nodes}s{spares}",
                   "--store-pid", str(store.process.pid), "--timeout-s", str(args.timeout_s)]
        if spares:
            command += ["--spares", str(spares), "--lost-attempts", str(args.lost_attempts),
                        "--lost-slot", args.lost_slot]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout_s + 120)
        except subprocess.TimeoutExpired:
            return {"backend": backend, "nodes": nodes, "ok": False,
                    "first_failure": f"no result within {args.timeout_s + 120} s"}
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if not lines:
            return {"backend": backend, "nodes": nodes, "ok": False,
                    "first_failure": f"exit {done.returncode}: {done.stderr.strip()[-300:]}"}
        return json.loads(lines[-1])
    finally:
        store.close()


def with_spares(row, spare):
    """The size's row with the spare scenario's figures (`spare`: its run's line) beside it."""
    row = dict(row)
    for key in SPARE_KEYS:
        if key in spare:
            row[key] = spare[key]
    row["replace_ok"] = bool(spare.get("ok"))
    if not spare.get("ok"):
        row["replace_failure"] = spare.get("first_failure", "?")
    return row


def gate(row, run, clock):
    """"median/max" ms of each agent's gate in the spare scenario (`run`: first, rejoin)."""
    return f"{row[f'gate_{run}_{clock}_ms_median']:.3f}/{row[f'gate_{run}_{clock}_ms_max']:.3f}"


def measured(row, key):
    """Whether `row` holds a whole figure `key`: a run that completed, or, for the forming
    figures, one that gave up while re-forming (it had formed). A run that failed earlier has
    zeros or partial times there. The spare scenario's figures: its own run completed."""
    if row.get(key, 0) <= 0:
        return False
    if key in SPARE_KEYS:
        return bool(row.get("replace_ok"))
    return bool(row.get("ok")) or (key in ("form_s", "store_cpu_form_s") and
                                   row.get("unfinished_phase") == "reform")


def extrapolate(rows, target):
    """Power law through the two largest sizes that measured each figure: (exponent, seconds at
    `target`). Per figure, so that a size that formed but did not re-form still counts for its
    form figures (and a curve is drawn on from its own last point)."""
    out = {}
    # The wall times, and the store's CPU seconds: on a real cluster (each agent on its own host)
    # the store is what all nodes share, while here the simulator's agents share the cores too.
    for key in ("form_s", "reform_s", "store_cpu_form_s", "store_cpu_reform_s"):
        have = sorted((r for r in rows if measured(r, key)), key=lambda r: r["nodes"])
        if len(have) < 2:
            continue
        a, b = have[-2], have[-1]
        k = math.log(b[key] / a[key]) / math.log(b["nodes"] / a["nodes"])
        out[key] = (k, b[key] * (target / b["nodes"]) ** k)
    return out


def read_bytes(row, phase):
    """Bytes of values the store sent each node in a phase (a simulator that counts them)."""
    value = row.get(f"read_bytes_per_node_{phase}")
    return "—" if value is None else f"{value:,.0f}"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sim", required=True)
    parser.add_argument("--daemon", required=True)
    parser.add_argument("--sizes", default="256,1024,4096")
    parser.add_argument("--etcd-sizes", default="256,1024")
    parser.add_argument("--etcd", default=ETCD,
                        help="etcd binaries for the etcd sizes, comma-separated (rows per version)")
    parser.add_argument("--timeout-s", type=int, default=300)
    parser.add_argument("--spares", type=int, default=1,
                        help="spares in each size's spare scenario (0: no spare runs)")
    parser.add_argument("--lost-attempts", type=int, default=5,
                        help="the lost agent's keep_alive_max_attempts (its hold's TTL in renewals)")
    parser.add_argument("--lost-slot", choices=("last", "first"), default="last",
                        help="the lost agent's group rank: the last (an ordinary node) or the first "
                             "(group rank 0, the host of the workers' store)")
    parser.add_argument("--json-out", default="")
    bench_json.add_option(parser)
    args = parser.parse_args()
    bench_json.record(args, "scale")
    raise_fd_limit()
    plan = [("c10d", int(n), None) for n in args.sizes.split(",") if n]
    for binary in (b for b in args.etcd.split(",") if b):
        if os.path.exists(binary):
            plan += [("etcd", int(n), binary) for n in args.etcd_sizes.split(",") if n]
        else:
            print(f"bench_scale: {binary} is not installed: its etcd rows are skipped", file=sys.stderr)
    versions = {}
    rows = []
    for backend, nodes, binary in plan:
        row = run_one(args, backend, nodes, binary)
        if args.spares > 0:
            row = with_spares(row, run_one(args, backend, nodes, binary, args.spares))
        if binary:
            versions.setdefault(binary, etcd_version(binary))
            row["store"] = f"etcd {versions[binary]}"
        else:
            row["store"] = "ddprun-rendezvous"
        rows.append(row)
        print(json.dumps(row), flush=True)
        if args.json_out:
            with open(args.json_out, "a") as out:
                out.write(json.dumps(row) + "\n")
    print()
    print(f"ddprun-scale-sim on {os.cpu_count()} CPUs; the simulator's agents and the store share them")
    print("| store | nodes | open s | form s | re-form s | store CPU s (open/form/re-form) | "
          "store peak RSS MiB | requests/node form | keys/node form | requests/node re-form | "
          "simulator CPU s (form/re-form) | bytes read/node form/re-form |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if not r.get("ok") and not r.get("form_s"):
            print(f"| {store_label(r)} | {r['nodes']} | failed: {r.get('first_failure', '?')} |||||||")
            continue
        if not r.get("ok"):  # formed, did not re-form in time: the figures of what finished
            print(f"| {store_label(r)} | {r['nodes']} | {r['open_s']:.2f} | {r['form_s']:.2f} | "
                  f"not within the timeout | {r['store_cpu_open_s']:.2f}/{r['store_cpu_form_s']:.2f}/— | "
                  f"{r['store_peak_rss_mib']:.1f} | {r['requests_per_node_form']:.1f} | "
                  f"{r['keys_per_node_form']:.1f} | — |")
            continue
        print(f"| {store_label(r)} | {r['nodes']} | {r['open_s']:.2f} | {r['form_s']:.2f} | {r['reform_s']:.2f} | "
              f"{r['store_cpu_open_s']:.2f}/{r['store_cpu_form_s']:.2f}/{r['store_cpu_reform_s']:.2f} | "
              f"{r['store_peak_rss_mib']:.1f} | {r['requests_per_node_form']:.1f} | "
              f"{r['keys_per_node_form']:.1f} | {r['requests_per_node_reform']:.1f} | "
              f"{r.get('sim_cpu_form_s', 0):.2f}/{r.get('sim_cpu_reform_s', 0):.2f} | "
              f"{read_bytes(r, 'form')}/{read_bytes(r, 'reform')} |")
    if args.spares > 0:
        print()
        print("Spares at scale: N active agents at --nnodes N:N plus spares; one lost as a SIGKILLed "
              "agent is; replace = from the loss until the last member of the new round (a spare "
              "among them) knows it; detect = until the last survivor saw the stop")
        print("| store | nodes | spares | lost node's hold TTL s, group rank | detect s | replace s | replace beyond detect s | "
              "store CPU s replace | simulator CPU s replace | requests/node replace | "
              "gate CPU ms/node first (median/max) | gate CPU ms/node rejoin (median/max) | "
              "gate wall ms/node first (median/max) | gate wall ms/node rejoin (median/max) |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            if not r.get("replace_ok"):
                print(f"| {store_label(r)} | {r['nodes']} | {r.get('spares', args.spares)} | "
                      f"failed: {r.get('replace_failure', '?')} |||||||||||")
                continue
            print(f"| {store_label(r)} | {r['nodes']} | {r['spares']} | "
                  f"{r['lost_hold_ttl_s']:.1f}, {r.get('lost_group_rank', '?')} | "
                  f"{r['replace_detect_s']:.2f} | {r['replace_s']:.2f} | "
                  f"{r['replace_s'] - r['replace_detect_s']:.2f} | {r['store_cpu_replace_s']:.2f} | "
                  f"{r['sim_cpu_replace_s']:.2f} | {r['requests_per_node_replace']:.1f} | "
                  f"{gate(r, 'first', 'cpu')} | {gate(r, 'rejoin', 'cpu')} | "
                  f"{gate(r, 'first', 'wall')} | {gate(r, 'rejoin', 'wall')} |")
    for label in dict.fromkeys(store_label(r) for r in rows):
        fit = extrapolate([r for r in rows if store_label(r) == label], 12500)
        for key, (k, seconds) in (fit or {}).items():
            print(f"{label} {key}: grows as N^{k:.2f} between the two largest sizes; at 12,500 nodes "
                  f"(100,000 ranks at 8 per node): ~{seconds:.1f} s; at 100,000 nodes: "
                  f"~{seconds * (100000 / 12500) ** k:.1f} s")
    return 0 if all(r.get("ok") and (args.spares == 0 or r.get("replace_ok")) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
