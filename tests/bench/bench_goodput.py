#!/usr/bin/python3
"""Goodput under failures, side by side in one run (docs/benchmarks.md, "Goodput under failures").

A real training loop (goodput_worker.py: DDP over gloo, a checkpoint every 20 steps) on a 2-node
job, one worker per node, the nodes being agents on this host (a hosts the c10d store and is never
hit; the faults go to the other active node), runs through one scripted trace of failures:

  crash     the worker exits 1 at its next step
  hang      the worker stops stepping (alive, silent)
  sigkill   the node's agent and workers are SIGKILLed; the node comes back RETURN_S later
  cutoff    the node's agent and workers are frozen (SIGSTOP) for CUT_S, then go on: nothing in
            or out, as a node cut off the network
  preempt   the scheduler preempts the job: SIGTERM to every agent; once all are gone, the job
            is requeued (every agent started again) REQUEUE_S later
  lemon     the node fails on every start (its worker exits 1 at its third step, for good)

under ddprun, ddprun with one spare (--spares 1 and a third agent), torchrun 1.13 and torchrun 2.6
(its own, in the trixie chroot). Each launcher gets --max-restarts 8; ddprun gets --hang-timeout 10
(torchrun has no hang detection: the process group's 30 s collective timeout finds the hang).
Between two incidents the job trains STEADY steps; after the last it trains STEADY more and is
told to finish.

Per incident, from the workers' own stamps (one clock, this host's):
  detect        fault -> first reaction of a surviving worker (a SIGTERM, or a collective error)
  back          fault -> the new workers of the recovered round started
  first step    fault -> the recovered round's first step
  steps lost    last step before the recovery - the step the recovered round resumed from
  launcher      detect, plus the time from the later of the node's return (RETURN_S, CUT_S,
                REQUEUE_S: not the launcher's) and the old workers' last sign of life (their
                exit is the workload's: a blocked rank waits GRACE_S) to the new workers started
  framework     first step - back (interpreter, torch import, process group, checkpoint load)
and for the whole trace the wall time from the first worker's start to the end, the share of it
that trained (final step x the median step time / wall), and whether the launcher survived.

    bench_goodput.py --ddprun build/launcher/ddprun [--runs 1] [--json FILE] [--plot PNG]

A benchmark, never a test: run it alone (flock /tmp/ddprun-bench.lock).
"""
import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "support"))
import bench_json  # noqa: E402
from ports import free_port  # noqa: E402

REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
TORCH2 = os.path.join(REPO, "scripts", "torch2-python")
SHARED = os.environ.get("DDPRUN_SHARED", os.path.abspath(os.path.join(REPO, "..", "shared")))
TORCHRUN113 = ["/usr/bin/python3", os.path.join(SHARED, "tools", "torchrun-py311.py")]
WORKER = os.path.join(HERE, "goodput_worker.py")

TRACE = ["crash", "hang", "sigkill", "cutoff", "preempt", "lemon"]
STEADY = 15          # steps trained between two incidents
RETURN_S = 10.0      # a SIGKILLed node is back this long after
CUT_S = 8.0          # a cut-off node is frozen this long
REQUEUE_S = 2.0      # the scheduler requeues a preempted job this long after it ended
GRACE_S = 3.0        # goodput_worker.py's grace for a signalled worker
INCIDENT_LIMIT = 150  # seconds an incident may take to recover before the launcher is said not to
START_LIMIT = 120    # seconds for the job to start training


class Agent:
    def __init__(self, name, argv, env, work):
        self.name = name
        self.log = open(os.path.join(work, f"agent.{name}.{time.monotonic_ns()}.log"), "w")
        self.process = subprocess.Popen(argv, env=dict(env, AGENT_NAME=name), cwd=work,
                                        stdin=subprocess.DEVNULL, stdout=self.log,
                                        stderr=subprocess.STDOUT, start_new_session=True)

    def tree(self):
        """The agent's pid and its descendants' (the node's processes)."""
        children = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as f:
                        ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                    children.setdefault(ppid, []).append(int(entry))
                except (OSError, IndexError, ValueError):
                    pass
        found, todo = [], [self.process.pid]
        while todo:
            pid = todo.pop()
            found.append(pid)
            todo.extend(children.get(pid, []))
        return found

    def signal_tree(self, sig):
        for pid in self.tree():
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def running(self):
        return self.process.poll() is None

    def end(self):
        if self.running():
            self.signal_tree(signal.SIGKILL)
            self.process.wait()
        self.log.close()


def launchers(ddprun):
    """name -> (argv head, torchrun's spelling, PYTHON_EXEC or None, spares)."""
    table = {
        "ddprun": ([ddprun, "--hang-timeout", "10"], False, "/usr/bin/python3", 0),
        "ddprun with a spare": ([ddprun, "--hang-timeout", "10", "--spares", "1"], False,
                            "/usr/bin/python3", 1),
        "torchrun 1.13": (TORCHRUN113, True, None, 0),
    }
    if os.path.exists(TORCH2) and subprocess.run([TORCH2, "-c", "import torch"], capture_output=True,
                                                 timeout=120).returncode == 0:
        table["torchrun 2.6"] = ([TORCH2, "-m", "torch.distributed.run"], True, None, 0)
    return table


def read_stamps(work):
    out = []
    try:
        with open(os.path.join(work, "stamps")) as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 5:
                    value = parts[5] if len(parts) > 5 else ""
                    out.append((float(parts[0]), parts[1], int(parts[2]), int(parts[3]), parts[4],
                                value))
    except OSError:
        pass
    return out


class Trace:
    def __init__(self, name, spec, work):
        head, torchrun, python, spares = spec
        self.name, self.work, self.spares = name, work, spares
        spell = (lambda o: "--" + o[2:].replace("-", "_")) if torchrun else (lambda o: o)
        self.port = free_port()
        self.argv = list(head) + [
            spell("--nnodes"), "2", spell("--nproc-per-node"), "1", spell("--max-restarts"), "8",
            spell("--rdzv-backend"), "c10d", spell("--rdzv-endpoint"), f"127.0.0.1:{self.port}",
            spell("--rdzv-id"), "goodput", WORKER, work]
        self.env = dict(os.environ)
        self.env.pop("PYTHON_EXEC", None)
        if python:
            self.env["PYTHON_EXEC"] = python
        self.agents = {}
        self.names = iter(f"n{i}" for i in range(1, 1000))
        self.incidents = []
        self.marks = []  # (epoch, incident): when each fault was injected
        self.survived = True

    def start(self, name):
        self.agents[name] = Agent(name, self.argv, self.env, self.work)

    def start_job(self):
        self.start("a")  # hosts the store: started first, never hit
        time.sleep(1.0)
        self.start(next(self.names))
        if self.spares:
            self.start(next(self.names))

    def stamps(self):
        return read_stamps(self.work)

    def last_step(self, stamps=None):
        steps = [int(s[5]) for s in (stamps or self.stamps()) if s[4] == "step"]
        return max(steps) if steps else 0

    def wait_steps(self, count, limit):
        """Until the job made `count` steps past now; False if it did not within `limit`."""
        goal = self.last_step() + count
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if self.last_step() >= goal:
                return True
            if not any(agent.running() for agent in self.agents.values()):
                return False
            time.sleep(0.05)
        return False

    def target(self):
        """The active node that is not a: the agent of the latest step's other rank."""
        for stamp in reversed(self.stamps()):
            if stamp[4] == "step" and stamp[1] != "a":
                return stamp[1]
        raise RuntimeError("no active node besides a")

    def recovered(self, since, stamps):
        """The pids that started after `since` and made 3 steps: the recovered round."""
        started = {s[3] for s in stamps if s[4] == "start" and s[0] > since}
        counts = {}
        for s in stamps:
            if s[4] == "step" and s[3] in started:
                counts[s[3]] = counts.get(s[3], 0) + 1
        return {pid for pid, n in counts.items() if n >= 3}

    def wait_recovery(self, since, steps_before, limit=INCIDENT_LIMIT):
        """Until a round that started after `since` made 3 steps, or the job trained on past
        `steps_before` + 3 without one (no restart); None if neither within `limit`."""
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            stamps = self.stamps()
            if len(self.recovered(since, stamps)) >= 2:
                return stamps
            started_before = {s[3] for s in stamps if s[4] == "start" and s[0] <= since}
            if self.last_step([s for s in stamps if s[3] in started_before]) >= steps_before + 3:
                return stamps  # the old round trained on: no restart
            if not any(agent.running() for agent in self.agents.values()):
                return None
            time.sleep(0.05)
        return None

    def measure(self, kind, at, away, stamps):
        new = self.recovered(at, stamps)
        old = {s[3] for s in stamps if s[4] == "start" and s[0] <= at}
        hit = {s[3] for s in stamps if s[4] in ("crash", "hang") and s[0] >= at}
        reactions = [s[0] for s in stamps if s[0] > at and s[3] in old - hit and
                     s[4] in ("term", "error")]
        row = {"incident": kind, "restart": bool(new)}
        if new:
            back = max(s[0] for s in stamps if s[4] == "start" and s[3] in new)
            first = max(min(s[0] for s in stamps if s[4] == "step" and s[3] == pid)
                        for pid in new)
            resumed = min(int(s[5]) for s in stamps if s[4] == "ready" and s[3] in new)
            last_old = max([int(s[5]) for s in stamps if s[4] == "step" and s[3] not in new] or
                           [0])
            # The old round's last sign of life: after it, and after the node's return, the
            # time until the new workers run is the launcher's.
            gone = max([s[0] for s in stamps if s[3] in old and s[0] > at] or [at])
            # No surviving worker reacted (the hung one was the only one signalled, or all were
            # gone at once): the new workers are the first reaction.
            detect = (min(reactions) - at) if reactions else back - at
            row.update(detect=detect, back=back - at,
                       first=first - at, lost=last_old - resumed,
                       launcher=min(back - at, detect + max(0.0, back - max(at + away, gone))),
                       framework=first - back)
        else:
            before = [s[0] for s in stamps if s[4] == "step" and s[0] <= at]
            after = [s[0] for s in stamps if s[4] == "step" and s[0] > at]
            row.update(detect=None, back=None, first=(min(after) - at) if after else None,
                       lost=0, launcher=0.0, framework=0.0,
                       stall=(min(after) - max(before)) if after and before else None)
        return row

    def run(self):
        self.start_job()
        if not self.wait_steps(STEADY, START_LIMIT):
            self.survived = False
            return
        self.first_start = min(s[0] for s in self.stamps() if s[4] == "start")
        for kind in TRACE:
            if not self.incident(kind):
                self.survived = False
                return
            if not self.wait_steps(STEADY, INCIDENT_LIMIT):
                self.survived = False
                return
        open(os.path.join(self.work, "finish"), "w").close()
        deadline = time.monotonic() + 60
        while any(agent.running() for agent in self.agents.values()):
            if time.monotonic() > deadline:
                self.survived = False
                return
            time.sleep(0.05)
        stamps = self.stamps()
        finished = [s for s in stamps if s[4] == "finished"]
        self.survived = bool(finished)
        if finished:
            self.end_time = max(s[0] for s in finished)
            self.final_step = int(finished[0][5])

    def incident(self, kind):
        target = self.target()
        node = self.agents[target]
        steps_before = self.last_step()
        at = time.time()
        self.marks.append((at, kind))
        away = 0.0
        if kind in ("crash", "hang"):
            open(os.path.join(self.work, f"{kind}.{target}"), "w").close()
        elif kind == "sigkill":
            node.signal_tree(signal.SIGKILL)
            node.process.wait()
            time.sleep(max(0.0, at + RETURN_S - time.time()))
            self.start(next(self.names))
            away = 0.0 if self.spares else RETURN_S
        elif kind == "cutoff":
            node.signal_tree(signal.SIGSTOP)
            time.sleep(CUT_S)
            node.signal_tree(signal.SIGCONT)
            away = 0.0 if self.spares else CUT_S
        elif kind == "preempt":
            for agent in self.agents.values():
                if agent.running():
                    agent.process.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 90
            while any(agent.running() for agent in self.agents.values()):
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.05)
            for agent in self.agents.values():
                agent.end()
            self.agents = {}
            time.sleep(REQUEUE_S)
            self.start_job()
            away = time.time() - at  # until the requeued job's last agent started
        elif kind == "lemon":
            open(os.path.join(self.work, f"lemon.{target}"), "w").close()
        stamps = self.wait_recovery(at, steps_before)
        if stamps is None:
            self.incidents.append({"incident": kind, "restart": False, "failed": True})
            return False
        row = self.measure(kind, at, away, stamps)
        if kind == "lemon":
            # Every start until the node is left out is part of the incident.
            row["lemon_starts"] = sum(1 for s in stamps if s[4] == "lemon" and s[0] > at)
        self.incidents.append(row)
        return True

    def close(self):
        for agent in self.agents.values():
            agent.end()

    def steps_over_time(self):
        return [(s[0], int(s[5])) for s in self.stamps() if s[4] == "step" and s[2] == 0]


def step_time(stamps):
    """The median time between two consecutive steps of one rank-0 process."""
    gaps = []
    last = {}
    for s in stamps:
        if s[4] == "step" and s[2] == 0:
            if s[3] in last:
                gaps.append(s[0] - last[s[3]])
            last[s[3]] = s[0]
    return statistics.median(gaps) if gaps else 0.0


def cell(value, digits=2):
    return "-" if value is None else f"{value:.{digits}f}"


def plot(path, series):
    """Rank 0's step over time, one panel per launcher, each fault a labelled line."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    shown = {name: data for name, data in series.items() if data[0]}
    fig, axes = plt.subplots(len(shown), 1, figsize=(10, 1.9 * len(shown) + 0.8), sharex=True,
                             squeeze=False)
    for ax, (name, (points, marks)) in zip(axes[:, 0], shown.items()):
        t0 = points[0][0]
        ax.plot([t - t0 for t, _ in points], [s for _, s in points], ".", markersize=2)
        for t, kind in marks:
            ax.axvline(t - t0, color="tab:red", alpha=0.5, linewidth=0.8)
            ax.annotate(kind, (t - t0, 1.0), xycoords=("data", "axes fraction"), fontsize=7,
                        rotation=90, va="top", ha="right", color="tab:red")
        ax.set_ylabel("step")
        ax.set_title(name, fontsize=9, loc="left")
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("seconds since the first step (rank 0's steps; red: a fault injected)")
    fig.suptitle("Training progress through one failure trace", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ddprun", required=True)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--only", help="comma-separated launcher names to run")
    parser.add_argument("--trace", default=",".join(TRACE),
                        help="comma-separated incidents, in order (default: the whole trace)")
    parser.add_argument("--plot", help="write the progress plot of the first run here (PNG)")
    parser.add_argument("--keep", action="store_true",
                        help="keep each run's directory (stamps, agents' logs) and say where")
    bench_json.add_option(parser)
    args = parser.parse_args()
    bench_json.record(args, "goodput")
    TRACE[:] = args.trace.split(",")
    table = launchers(os.path.abspath(args.ddprun))
    if args.only:
        table = {k: v for k, v in table.items() if k in args.only.split(",")}
    results = {name: [] for name in table}
    series = {}
    for run in range(args.runs):
        for name, spec in table.items():
            with tempfile.TemporaryDirectory(prefix="ddprun-bench-goodput-") as scratch:
                work = tempfile.mkdtemp(prefix="ddprun-bench-goodput-") if args.keep else scratch
                os.chmod(work, 0o755)
                trace = Trace(name, spec, work)
                started = time.time()
                try:
                    trace.run()
                finally:
                    trace.close()
                stamps = trace.stamps()
                end = getattr(trace, "end_time", time.time())
                first = getattr(trace, "first_start", started)
                median_step = step_time(stamps)
                final = getattr(trace, "final_step", trace.last_step(stamps))
                results[name].append({"survived": trace.survived, "incidents": trace.incidents,
                                      "wall": end - first, "step": median_step,
                                      "final": final})
                print(f"# {name} run {run + 1}: survived={trace.survived} wall={end - first:.1f}s "
                      f"{'(kept: ' + work + ') ' if args.keep else ''}"
                      f"final step={final} step={median_step * 1000:.0f}ms", flush=True)
                for row in trace.incidents:
                    print(f"#   {row}", flush=True)
                if run == 0:
                    series[name] = (trace.steps_over_time(), trace.marks)

    print("\nPer incident (seconds from the fault; median over the runs that came through it; "
          "'-' none):\n")
    print("| incident | launcher | detect | workers back | first step | steps lost | "
          "launcher share | framework share |")
    print("|---|---|---|---|---|---|---|---|")
    for kind in TRACE:
        for name, runs in results.items():
            rows = [r for run in runs for r in run["incidents"] if r["incident"] == kind]
            done = [r for r in rows if not r.get("failed")]
            lost = len(rows) - len(done)
            label = name + (f" (job lost in {lost} of {len(runs)})" if lost else "")
            if not rows:
                print(f"| {kind} | {name} | not reached | | | | | |")
                continue
            if not done:
                print(f"| {kind} | {label} | **job lost** | | | | | |")
                continue

            def med(key):
                values = [r[key] for r in done if r.get(key) is not None]
                return statistics.median(values) if values else None
            back = cell(med("back")) if any(r["restart"] for r in done) else \
                f"no restart (stall {cell(med('stall'))})"
            print(f"| {kind} | {label} | {cell(med('detect'))} | {back} | {cell(med('first'))} | "
                  f"{cell(med('lost'), 0)} | {cell(med('launcher'))} | {cell(med('framework'))} |")

    # Time lost to the incidents every launcher can come through (not the lemon, which only a
    # spare survives): from each fault to training again, plus the steps trained again.
    common = [kind for kind in TRACE if kind != "lemon"]
    lost_s = {}
    for name, runs in results.items():
        per_run = []
        for run in runs:
            rows = {r["incident"]: r for r in run["incidents"]}
            if all(kind in rows and not rows[kind].get("failed") for kind in common):
                per_run.append(sum(rows[k]["first"] + rows[k]["lost"] * run["step"]
                                   for k in common))
        lost_s[name] = statistics.median(per_run) if per_run else None
    print(f"\nThe whole trace (time lost: over {', '.join(common)}: each fault to the first step "
          "after it, plus the steps trained again):\n")
    print("| launcher | came through the trace | came through all but the lemon | "
          "time lost s | vs torchrun 2.6 | vs torchrun 1.13 | wall s | training share |")
    print("|---|---|---|---|---|---|---|---|")
    for name, runs in results.items():
        survived = sum(r["survived"] for r in runs)
        through = sum(1 for run in runs if all(
            any(r["incident"] == k and not r.get("failed") for r in run["incidents"])
            for k in common))
        mine = lost_s[name]

        def ratio(anchor):
            other = lost_s.get(anchor)
            return f"{mine / other:.2f}x" if mine is not None and other else "-"
        done = [r for r in runs if r["survived"]]
        wall = share = ""
        if done:
            wall = f"{statistics.median(r['wall'] for r in done):.1f}"
            share = f"{statistics.median(r['final'] * r['step'] / r['wall'] for r in done) * 100:.1f} %"
        print(f"| {name} | {survived} of {len(runs)} | {through} of {len(runs)} | "
              f"{cell(mine, 1)} | {ratio('torchrun 2.6')} | {ratio('torchrun 1.13')} | {wall} | "
              f"{share} |")
    if args.plot and series:
        plot(args.plot, series)
        print(f"\nplot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
