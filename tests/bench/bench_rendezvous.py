#!/usr/bin/python3
"""Rendezvous on etcd vs on ddprun's own store (c10d), side by side in one run (docs/benchmarks.md):

  form    N agents (N = 2, 8, 32) of one job, one worker each, all started at once on this host:
          the time from the first agent's start to the last worker of the round running.
  death   the same job, elastic (--nnodes 1:N); once every worker runs, one agent is SIGKILLed
          (one that hosts nothing: not the c10d store's host, not the workers' store's): the time
          from the kill to every survivor's worker of the new round (N - 1 nodes) running.
          On etcd the agent hosting the round's workers' store is killed too (a row of its own):
          the survivors re-form with a new host; on c10d that agent hosts the rendezvous store
          as well, and the job ends with it, so there is no such row.

The agents are real ddprun processes (simulated nodes: N agents on one host, each its own node).
etcd is Debian's etcd-server, one member on loopback with its data in /dev/shm (the figures are the
protocol's and the backend's, not a disk's). torchrun 1.13 (c10d) runs beside them up to N = 8 as
the anchor for forming a round (32 torchrun agents do not fit 2 cores). Each figure is the median of --repeats runs,
the backends alternating.
"""
import argparse
import datetime
import glob
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from alternating_runs import medians  # noqa: E402
from ports import free_port  # noqa: E402
import bench_json  # noqa: E402  (--json: the printed tables as one document)

PROBE = os.path.join(HERE, "rendezvous_probe.sh")
TORCHRUN = ["/usr/bin/python3", os.path.join(os.environ.get("DDPRUN_SHARED", "/work/shared"),
                                             "tools", "torchrun-py311.py")]
ETCD = "/usr/bin/etcd"
WAIT_S = 120  # every wait of a run gives up after this, saying what it saw


class Etcd:
    """One etcd member on loopback, its data in a private directory under /dev/shm."""

    def __init__(self, binary=None):
        # Looked up at the call, not at import: a caller that sets ETCD afterwards gets its binary.
        binary = binary or ETCD
        self.data = tempfile.mkdtemp(prefix="ddprun-bench-etcd-", dir="/dev/shm")
        self.port, peer = free_port(), free_port()
        self.log = open(os.path.join(self.data, "log"), "w")
        self.process = subprocess.Popen(
            [binary, "--name", "m0", "--data-dir", os.path.join(self.data, "m0"),
             "--listen-client-urls", f"http://127.0.0.1:{self.port}",
             "--advertise-client-urls", f"http://127.0.0.1:{self.port}",
             "--listen-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-cluster", f"m0=http://127.0.0.1:{peer}"],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            health = subprocess.run(["/usr/bin/etcdctl", "--endpoints", self.endpoint(),
                                     "endpoint", "health"], capture_output=True)
            if health.returncode == 0:
                return
            time.sleep(0.2)
        self.close()
        raise RuntimeError("etcd did not become healthy within 30 s")

    def endpoint(self):
        return f"127.0.0.1:{self.port}"

    def close(self):
        self.process.kill()
        self.process.wait()
        self.log.close()
        shutil.rmtree(self.data, ignore_errors=True)


class Backend:
    def __init__(self, name, ddprun=None, etcd=None):
        self.name, self.ddprun, self.etcd = name, ddprun, etcd

    def argv(self, nnodes, run_id, work, endpoint):
        if self.ddprun is None:  # torchrun 1.13, c10d
            return TORCHRUN + ["--nnodes", nnodes, "--nproc_per_node", "1", "--rdzv_backend", "c10d",
                               "--rdzv_endpoint", endpoint, "--rdzv_id", run_id, "--max_restarts", "3",
                               "--monitor_interval", "0.1", "--no_python", PROBE, work]
        backend = "etcd" if self.etcd else "c10d"
        return [self.ddprun, "--nnodes", nnodes, "--nproc-per-node", "1", "--rdzv-backend", backend,
                "--rdzv-endpoint", endpoint, "--rdzv-id", run_id, "--max-restarts", "3",
                "--no-python", PROBE, work]


def wait_for(what, predicate, seen):
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.01)
    raise RuntimeError(f"gave up after {WAIT_S} s waiting for {what}; saw {seen()}")


def starts(work, nodes):
    return [float(open(f).read()) for f in glob.glob(os.path.join(work, f"start.{nodes}.*"))]


def host_of(logs):
    """The agents (indexes) hosting the rendezvous store (c10d) and those hosting a round's
    workers' store (group rank 0), as their INFO lines say: two sets."""
    rendezvous, workers = set(), set()
    for i, path in enumerate(logs):
        text = open(path, errors="replace").read()
        if "hosting the rendezvous store" in text:
            rendezvous.add(i)
        if re.search(r"round \d+: group rank 0 of", text):
            workers.add(i)
    return rendezvous, workers


def run_job(backend, n, kill=None):
    """Starts N agents; returns the formation time, and with `kill` ("idle" or "store host") the
    time from SIGKILL of such an agent to the survivors' new round running."""
    work = tempfile.mkdtemp(prefix="ddprun-bench-rdzv-")
    run_id = f"bench{os.getpid()}x{time.monotonic_ns()}"
    endpoint = backend.etcd.endpoint() if backend.etcd else f"127.0.0.1:{free_port()}"
    nnodes = f"1:{n}" if kill else str(n)
    env = dict(os.environ, LOGLEVEL="INFO")
    agents, logs = [], []
    try:
        first = time.time()
        for i in range(n):
            logs.append(os.path.join(work, f"agent.{i}.log"))
            with open(logs[-1], "w") as log:
                agents.append(subprocess.Popen(backend.argv(nnodes, run_id, work, endpoint), env=env,
                                               stdout=log, stderr=subprocess.STDOUT,
                                               start_new_session=True))
        wait_for(f"{n} workers of the first round", lambda: len(starts(work, n)) == n,
                 lambda: sorted(os.listdir(work)))
        result = {"form_s": max(starts(work, n)) - first}
        if kill:
            # Which agent hosts what is read from their logs (LOGLEVEL=INFO), so the same event is
            # measured on every backend: the worker files name group ranks, not agents.
            rendezvous_hosts, workers_hosts = host_of(logs)
            hosts = rendezvous_hosts | workers_hosts
            if kill == "idle":
                # An agent that hosts nothing; with 2 agents on c10d there may be none (the one
                # that registered first is group rank 0, and the rendezvous store's host may have
                # been second): then the other one, which hosts only the workers' store.
                spare = [i for i in range(n - 1, -1, -1) if i not in hosts]
                victim = spare[0] if spare else next(i for i in range(n - 1, -1, -1) if i not in rendezvous_hosts)
            else:
                victim = min(hosts)
            killed = time.time()
            os.kill(agents[victim].pid, signal.SIGKILL)
            wait_for(f"{n - 1} workers of the survivors' round", lambda: len(starts(work, n - 1)) == n - 1,
                     lambda: sorted(os.listdir(work)))
            result["death_s"] = max(starts(work, n - 1)) - killed
        open(os.path.join(work, "stop"), "w").close()
        for agent in agents:
            try:
                agent.wait(timeout=WAIT_S)
            except subprocess.TimeoutExpired:
                pass
        return result
    finally:
        for agent in agents:
            if agent.poll() is None:
                os.killpg(agent.pid, signal.SIGKILL)
                agent.wait()
        shutil.rmtree(work, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ddprun", required=True)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--sizes", default="2,8,32")
    bench_json.add_option(parser)
    args = parser.parse_args()
    bench_json.record(args, "rendezvous")
    etcd = Etcd()
    try:
        ddprun = os.path.abspath(args.ddprun)
        on_etcd = Backend("ddprun, etcd", ddprun, etcd)
        on_c10d = Backend("ddprun, c10d", ddprun)
        torchrun = Backend("torchrun 1.13, c10d")
        rows = []
        for n in (int(s) for s in args.sizes.split(",")):
            backends = [on_etcd, on_c10d] + ([torchrun] if n <= 8 else [])
            formed = medians(backends, args.repeats, lambda b: run_job(b, n))
            # torchrun's logs do not say which agent hosts what: it runs in the formation rows only.
            death = medians([on_etcd, on_c10d], args.repeats, lambda b: run_job(b, n, kill="idle"))
            rows.append((f"{n} agents form a round", formed))
            rows.append((f"{n} agents: one killed -> survivors' new round running", death, "death_s"))
            if n > 2:
                host = medians([on_etcd], args.repeats, lambda b: run_job(b, n, kill="store host"))
                rows.append((f"{n} agents: the workers' store's host killed -> new round running",
                             host, "death_s"))
        print(f"Rendezvous benchmark, {datetime.date.today()}, {platform.node()}, {os.cpu_count()} CPUs, "
              f"median of {args.repeats} alternating runs per figure; etcd: one member on loopback")
        print()
        print("| measurement | ddprun, etcd | ddprun, c10d | torchrun 1.13, c10d | etcd vs c10d |")
        print("|---|---|---|---|---|")
        for label, figures, *field in rows:
            key = field[0] if field else "form_s"
            cell = lambda name: (f"{figures[name][key] * 1000:.0f} ms" if name in figures else "—")  # noqa: E731
            ratio = (f"{figures['ddprun, etcd'][key] / figures['ddprun, c10d'][key]:.1f}x"
                     if "ddprun, c10d" in figures else "c10d: the job ends")
            print(f"| {label} | {cell('ddprun, etcd')} | {cell('ddprun, c10d')} | "
                  f"{cell('torchrun 1.13, c10d')} | {ratio} |")
    finally:
        etcd.close()


if __name__ == "__main__":
    main()
