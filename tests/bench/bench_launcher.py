#!/usr/bin/python3
"""Side-by-side benchmark of ddprun against torchrun 1.13 (Debian's, via torchrun-py311.py) and
torchrun 2.6 (`scripts/torch2-python -m torch.distributed.run`, where its chroot is installed).

  launch    --nproc-per-node 8 of a no-op binary (`true`): wall time and the launcher's peak RSS,
            beside the kernel's floor (ddprun-spawn-floor: posix_spawn 8 `true` and wait for them)
            and `ddprun --version` (the agent's own exec, dynamic linking and start-up alone)
  restart   one node, 8 workers: the last rank dies (SIGKILL); time until every worker of the
            new attempt has started; beside the floor of a restart (ddprun-spawn-floor --stamp:
            posix_spawn 8 of the same workers, timed from just before the first spawn until
            every one has started)
  restart2  two nodes (c10d on 127.0.0.1), 2 workers each: the same, across both nodes

torchrun 1.13 runs twice: with its default --monitor_interval (5 s) and with 0.1 s (2.x's
default); torchrun 2.6 with its own default (0.1 s).
Each figure is the median of --repeats runs, the launchers alternating.
"""
import argparse
import datetime
import glob
import os
import platform
import shlex
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

PROBE = os.path.join(HERE, "restart_probe.sh")
TORCHRUN = ["/usr/bin/python3", os.path.join(os.environ.get("DDPRUN_SHARED", "/work/shared"),
                                             "tools", "torchrun-py311.py")]
TORCH2_PYTHON = os.path.join(HERE, "..", "..", "scripts", "torch2-python")
TORCHRUN2 = [TORCH2_PYTHON, "-m", "torch.distributed.run"]


def torch2_available():
    """scripts/torch2-python exits 77 where its chroot is missing or we are not root."""
    try:
        return subprocess.run([TORCH2_PYTHON, "-c", "import torch.distributed.run"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


class Launcher:
    def __init__(self, name, kind, binary=None, monitor=None, command=None):
        self.name, self.kind, self.binary, self.monitor = name, kind, binary, monitor
        self.command = command or TORCHRUN

    def argv(self, nodes_spec, nproc, script, extra=()):
        """nodes_spec: ("standalone",) or ("c10d", endpoint, run_id)."""
        if self.kind == "ddprun":
            head = [self.binary, "--nproc-per-node", str(nproc)]
            opt = lambda s: s  # noqa: E731 (dashed spellings)
        else:
            head = self.command + ["--nproc_per_node", str(nproc)]
            if self.monitor is not None:
                head += ["--monitor_interval", str(self.monitor)]
            opt = lambda s: s.replace("-", "_").replace("__", "--", 1)  # noqa: E731
        if nodes_spec[0] == "standalone":
            head += ["--standalone"]
        else:
            _, endpoint, run_id = nodes_spec
            head += [opt("--nnodes"), "2", opt("--rdzv-backend"), "c10d", opt("--rdzv-endpoint"),
                     endpoint, opt("--rdzv-id"), run_id]
        return head + list(extra) + script


def run_timed(argv, env=None):
    """Wall time and the launcher's peak RSS. The RSS comes from /usr/bin/time: wait4's ru_maxrss
    for a child forked from this (much larger) Python process counts our pages, shared with it
    until its exec, as its own."""
    with tempfile.NamedTemporaryFile(mode="r") as rss:
        start = time.monotonic()
        code = subprocess.run(["/usr/bin/time", "-o", rss.name, "-f", "%M", *argv],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env).returncode
        seconds = time.monotonic() - start
        return seconds, int(rss.read().split()[-1]) / 1024, code


class Floor:
    """posix_spawn of 8 `true` and waiting for them: what any launcher must spend at least."""
    name = "floor"

    def __init__(self, binary):
        self.binary = binary


class Version:
    """`ddprun --version`: exec, dynamic linking, static initialisers and exit, nothing else."""
    name = "ddprun --version"

    def __init__(self, binary):
        self.binary = binary


class RestartFloor:
    """A fresh spawn of 8 restart_probe.sh workers, from just before the first posix_spawn until
    every one has recorded its start: what any restart must spend at least."""
    name = "floor"
    kind = "floor"

    def __init__(self, binary):
        self.binary = binary


def launch(launcher):
    if isinstance(launcher, Floor):
        argv = [launcher.binary, "8", "true"]
    elif isinstance(launcher, Version):
        argv = [launcher.binary, "--version"]
    else:
        argv = None
    if argv:
        seconds, rss, code = run_timed(argv)
        assert code == 0, f"{launcher.name} exited {code}"
        return {"seconds": seconds, "rss_mib": rss}
    seconds, rss, code = run_timed(launcher.argv(("standalone",), 8, ["true"],
                                                 extra=[("--no-python" if launcher.kind == "ddprun" else "--no_python")]))
    assert code == 0, f"{launcher.name} launch exited {code}"
    return {"seconds": seconds, "rss_mib": rss}


def restart(launcher, nodes, nproc=4):
    work = tempfile.mkdtemp(prefix="ddprun-bench-restart-")
    script = [PROBE, work]
    extra = (["--max-restarts", "1", "--no-python"] if launcher.kind == "ddprun"
             else ["--max_restarts", "1", "--no_python"])
    if launcher.kind == "floor":
        agents = [subprocess.Popen([launcher.binary, "--stamp", os.path.join(work, "death"), str(nproc),
                                    *script], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
        world = nproc
    elif nodes == 1:
        agents = [subprocess.Popen(launcher.argv(("standalone",), nproc, script, extra),
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
        world = nproc
    else:
        spec = ("c10d", f"127.0.0.1:{free_port()}", f"bench{os.getpid()}{time.monotonic_ns()}")
        agents = [subprocess.Popen(launcher.argv(spec, 2, script, extra), stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL) for _ in range(2)]
        world = 4
    codes = [a.wait(timeout=300) for a in agents]
    assert codes == [0] * len(agents), f"{launcher.name} restart run exited {codes}"
    death = float(open(os.path.join(work, "death")).read())
    starts = [float(open(f).read()) for f in glob.glob(os.path.join(work, "start.1.*"))]
    assert len(starts) == world, f"{launcher.name}: {len(starts)} workers restarted, wanted {world}"
    subprocess.run(["rm", "-rf", work])
    return {"seconds": max(starts) - death}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ddprun", required=True)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--floor", help="ddprun-spawn-floor (default: beside --ddprun's build, "
                        "tests/bench/ddprun-spawn-floor)")
    parser.add_argument("--only", choices=("launch", "restart"), help="one benchmark, not all")
    parser.add_argument("--no-torchrun", action="store_true",
                        help="ddprun and the floor only (quick, for profiling; no ratios to torchrun)")
    bench_json.add_option(parser)
    args = parser.parse_args()
    bench_json.record(args, "launcher")
    ddprun = Launcher("ddprun", "ddprun", binary=os.path.abspath(args.ddprun))
    slow = Launcher("torchrun 1.13 (monitor 5 s, its default)", "torchrun", monitor=5)
    fast = Launcher("torchrun 1.13 (monitor 0.1 s, 2.x's default)", "torchrun", monitor=0.1)
    torchruns = [] if args.no_torchrun else [slow, fast]
    if not args.no_torchrun and torch2_available():
        torchruns.append(Launcher("torchrun 2.6", "torchrun", command=TORCHRUN2))
    launchers = [ddprun, *torchruns]
    build = os.path.dirname(os.path.dirname(os.path.abspath(args.ddprun)))
    floor = Floor(os.path.abspath(args.floor or os.path.join(build, "tests", "bench", "ddprun-spawn-floor")))
    version = Version(ddprun.binary)

    rows = []
    if args.only in (None, "launch"):
        r = medians([*launchers, floor, version], args.repeats, launch)
        ms = lambda name: r[name]["seconds"] * 1000  # noqa: E731
        rows.append(("launch 8 no-op workers, wall (vs the floor: posix_spawn 8 `true`, wait)",
                     f"{ms('ddprun'):.1f} ms", f"{ms('floor'):.1f} ms",
                     f"**{ms('ddprun') / ms('floor'):.2f}x the floor**"))
        rows.append(("`ddprun --version`, wall (vs the floor)", f"{ms(version.name):.1f} ms",
                     f"{ms('floor'):.1f} ms", ""))
        for t in torchruns:
            rows.append((f"launch 8 no-op workers, wall (vs {t.name})", f"{ms('ddprun'):.1f} ms",
                         f"{ms(t.name):.0f} ms", f"**{ms(t.name) / ms('ddprun'):.0f}x faster**"))
        anchor = fast.name if torchruns else "floor"
        rows.append((f"launcher peak RSS (vs {anchor})", f"{r['ddprun']['rss_mib']:.1f} MiB",
                     f"{r[anchor]['rss_mib']:.1f} MiB",
                     f"{r[anchor]['rss_mib'] / r['ddprun']['rss_mib']:.2f}x"))
    restart_floor = RestartFloor(floor.binary)
    for nodes, nproc, label in ((1, 8, "one node, 8 workers"), (2, 2, "two nodes x 2 workers")):
        if args.only not in (None, "restart"):
            break
        racers = [*launchers, restart_floor] if nodes == 1 else launchers
        r = medians(racers, args.repeats, lambda l: restart(l, nodes, nproc))
        if nodes == 1:
            rows.append((f"worker death -> all new workers running, {label} (vs the floor: "
                         "posix_spawn 8 of the same workers until all have started)",
                         f"{r['ddprun']['seconds'] * 1000:.1f} ms", f"{r['floor']['seconds'] * 1000:.1f} ms",
                         f"**{r['ddprun']['seconds'] / r['floor']['seconds']:.2f}x the floor**"))
        if not torchruns:
            rows.append((f"worker death -> all new workers running, {label}",
                         f"{r['ddprun']['seconds'] * 1000:.1f} ms", "", ""))
        for t in torchruns:
            rows.append((f"worker death -> all new workers running, {label} (vs {t.name})",
                         f"{r['ddprun']['seconds'] * 1000:.1f} ms", f"{r[t.name]['seconds'] * 1000:.0f} ms",
                         f"**{r[t.name]['seconds'] / r['ddprun']['seconds']:.0f}x faster**"))

    print(f"Launcher benchmark, {datetime.date.today()}, {platform.node()}, {os.cpu_count()} CPUs, "
          f"median of {args.repeats} alternating runs per figure")
    print()
    print("| measurement | ddprun | anchor | ddprun vs anchor |")
    print("|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
