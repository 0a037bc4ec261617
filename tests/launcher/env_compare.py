#!/usr/bin/python3
"""Runs env_probe.py under torchrun and under ddprun and compares what the workers got.

    env_compare.py [--scenario standalone|static|c10d-2nodes|all ...] [--only torchrun|ddprun]
                   [--ddprun PATH] [--torchrun "CMD ..."] [--keep DIR] [--verbose]

For each scenario both launchers run the same probe with the same script arguments, from the same
kind of starting environment (the caller's, minus launcher-owned variables, plus marker variables
and a private TMPDIR). Per global rank it compares

  * the environment variables the launcher ADDED (or changed, or removed) relative to the
    environment the driver started the launcher with, by name and by normalised value;
  * process facts: argv, interpreter options (-u), cwd, parent, session and process group, stdin,
    stdout/stderr, extra open descriptors, signal masks, parent-death signal, umask, rlimits.

Values that legitimately differ from run to run are normalised into placeholders (see NORMALISATION
below). Every remaining difference must be listed in DELIBERATE_DIFFERENCES, and every entry there
must show up exactly as described; otherwise the driver exits 1. It also checks argv pass-through,
"-u", that each ddprun worker leads its own session (sid == pid), that the caller's variables reach
the workers unchanged, rank invariants, and that no process is left behind.

Exit status: 0 all good; 1 a difference, a failed launcher or a failed check; 2 usage; 77 the
torchrun interpreter has no torch (CTest "skipped").

The torchrun side alone (`--only torchrun`) needs no ddprun binary: it prints what torchrun set.
torchrun 1.13 is Debian's python3-torch, run through shared/tools/torchrun-py311.py; it only knows
underscore spellings (--nproc_per_node ...), so the driver spells options per launcher.
"""
import argparse
import contextlib
import dataclasses
import fcntl
import json
import os
import re
import shlex
import signal
import socket
import string
import subprocess
import sys
import tempfile
import time
import uuid

SKIP = 77
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "support"))
from jobs import Deadline, process_tree  # noqa: E402
from ports import TORCH113_STANDALONE_PORT, bindable, free_port  # noqa: E402
REPO = os.path.dirname(os.path.dirname(HERE))
PROBE = os.path.join(HERE, "env_probe.py")
DEFAULT_DDPRUN = os.path.join(REPO, "build", "launcher", "ddprun")
DEFAULT_TORCHRUN = "/usr/bin/python3 /work/shared/tools/torchrun-py311.py"
DEFAULT_TIMEOUT = 60.0
# For the whole comparison (6 launcher runs and the torch probe): CTest's TIMEOUT is 300 s, and a
# run that is cut short by this says what it saw (the process tree, the launchers' output), which
# CTest's own timeout would not.
DEFAULT_BUDGET = 150.0
SCENARIOS = ("standalone", "static", "c10d-2nodes")

ABSENT = "<absent>"
REMOVED = "<removed>"

# Script arguments given to both launchers; they must reach the workers the same way.
# "${local_rank}" is torchrun's argument macro (torch.distributed.elastic.utils.api.macros:
# string.Template.safe_substitute on every script argument, in 1.13 and 2.x alike).
SCRIPT_ARGS = ["--lr=3", "-m", "x", "--nproc-per-node", "9", "--nproc_per_node=7", "two words", "",
               "\u00fcn\u00efcode", "--ckpt=/ckpt/${local_rank}"]

# Set by the caller; they must reach every worker unchanged.
CALLER_VARS = {
    "DDPRUN_PROBE_MARKER": "xyz",
    "DDPRUN_PROBE_TRICKY": "a b=c;'q' \"dq\" $HOME ${local_rank} \\ \u00fcn\u00ef\ttab\nnewline",
    "DDPRUN_PROBE_EMPTY": "",
}

# Removed from the starting environment so that the launchers' own rules show (and so that a
# variable left over in the caller's shell cannot hide one the launcher should set).
SCRUB = {
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
    "ROLE_NAME", "ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS",
    "NCCL_ASYNC_ERROR_HANDLING", "TORCH_NCCL_ASYNC_ERROR_HANDLING", "PYTHON_EXEC", "LOGLEVEL",
    "CUDA_VISIBLE_DEVICES", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "TMPDIR", "TMP", "TEMP",
}
SCRUB_PREFIXES = ("PET_", "TORCHELASTIC_", "TORCH_ELASTIC_", "DDPRUN_")


# ------------------------------------------------------------------------------------------------
# Deliberate differences between torchrun 1.13 and ddprun.
#
# Key: an environment variable name, or "process: <fact>" for a process fact. For every scenario
# listed, each rank's normalised torchrun value must fully match `torchrun` (a regular expression;
# "<absent>" = not set) and ddprun's must fully match `ddprun`, and the two must differ. Outside
# the listed scenarios the values must be equal like any other variable.

@dataclasses.dataclass(frozen=True)
class Deliberate:
    scenarios: tuple
    torchrun: str
    ddprun: str
    why: str


ALL = SCENARIOS
IP_LITERAL = r"\d{1,3}(\.\d{1,3}){3}|[0-9A-Fa-f:]*:[0-9A-Fa-f:.]*"

DELIBERATE_DIFFERENCES = {
    "TORCHELASTIC_USE_AGENT_STORE": Deliberate(
        ("standalone", "c10d-2nodes"), "False", "True",
        "torch 1.13 lets worker rank 0 host the process-group store for c10d/standalone; ddprun "
        "always hosts it in the rank-0 agent and says True, like torch >= 2.5 (static is True in "
        "both)."),
    "MASTER_ADDR": Deliberate(
        ("standalone", "c10d-2nodes"), "<FQDN>", IP_LITERAL,
        "torch (1.13 and 2.x) advertises the rank-0 agent's FQDN (socket.getfqdn()); ddprun "
        "advertises an IP address: 127.0.0.1 for --standalone, else the local address of the "
        "interface that reaches the rendezvous endpoint (unless --local-addr), so workers never "
        "depend on name resolution (pytorch#150532, #85300, #73656)."),
    "TORCHELASTIC_RUN_ID": Deliberate(
        ("standalone",), "<UUID>", "<HEX16>",
        "--standalone makes up a random run id: torch uses str(uuid4()), ddprun 16 hex digits. "
        "Any unique string works; nothing parses it."),
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": Deliberate(
        ALL, ABSENT, "1",
        "The torch >= 2.2 name of NCCL_ASYNC_ERROR_HANDLING; 1.13 only sets the old name. ddprun "
        "sets both (each: the inherited value, else 1)."),
    "TORCHELASTIC_SIGNALS_TO_HANDLE": Deliberate(
        ALL, ABSENT, "SIGTERM,SIGINT,SIGHUP,SIGQUIT",
        "torch >= 2.9 (--signals-to-handle) puts the handled signal list into the agent's "
        "environment, so workers inherit it; 1.13 has no such option."),
    "DDPRUN_GENERATION": Deliberate(
        ALL, ABSENT, r"[0-9]+",
        "ddprun's own: the job-global rendezvous round, incremented on every re-form (torch's "
        "per-node TORCHELASTIC_RESTART_COUNT cannot tell rounds apart, pytorch#135712)."),
    "DDPRUN_AGENT": Deliberate(
        ALL, ABSENT, r"[0-9]+-[0-9a-f]{16}",
        "ddprun's own: a token unique to the agent (pid and random bits), inherited by everything "
        "the workers start, so that the agent's guardian can find and kill even descendants that "
        "left their session if the agent is killed where no cgroup holds them."),
    "DDPRUN_HEARTBEAT_FILE": Deliberate(
        ALL, ABSENT, r"<TMPDIR>/ddprun-agent-\w{6}/heartbeat-[0-9]+",
        "ddprun's own: the worker's progress heartbeat (os.utime of it reports progress) that "
        "--hang-timeout monitors; a file of the agent's private directory."),
    "DDPRUN_STOP_FILE": Deliberate(
        ALL, ABSENT, r"<TMPDIR>/ddprun-agent-\w{6}/stop-[0-9]+",
        "ddprun's own: the graceful stop's notice, a file that appears (reason, deadline) when the "
        "agent starts to stop the workers, before their signal; a fresh name per attempt."),
    "DDPRUN_STACK_DIR": Deliberate(
        ALL, ABSENT, r"<TMPDIR>/ddprun-agent-\w{6}",
        "ddprun's own: where a Python worker's faulthandler writes every thread's stack when the "
        "agent asks a hung worker where it is (docs/errors.md, Hangs)."),
    "DDPRUN_STACK_SIGNAL": Deliberate(
        ALL, ABSENT, r"[0-9]+",
        "ddprun's own: the real-time signal that asks a Python worker for its stacks."),
    "PYTHONPATH": Deliberate(
        ALL, r".*", r"<TMPDIR>/ddprun-agent-\w{6}/python(:.*)?",
        "ddprun puts its stack hook first (a sitecustomize.py that registers faulthandler for the "
        "stack signal and for fatal signals, then runs the sitecustomize it shadows); the "
        "caller's PYTHONPATH follows unchanged."),
    "process: session / process group": Deliberate(
        ALL, "sid=launcher's pgid=launcher's", "sid=own pgid=own",
        "torch 1.13 leaves workers in torchrun's session and process group; ddprun starts each "
        "worker in its own session (setsid), like torch >= 2.2 (start_new_session=True), so a "
        "killpg reaches the worker's children too (pytorch#110065)."),
    "process: stdout / stderr": Deliberate(
        ALL, "launcher's stdout / launcher's stderr", "pipe / pipe",
        "torch writes worker output straight into the inherited descriptors; ddprun reads it "
        "through a pipe per stream and copies whole lines to its own stdout/stderr (no "
        "mid-line interleaving between ranks, pytorch#117383; needed for prefixes and filters)."),
    "process: extra open descriptors": Deliberate(
        ALL, "none", r"<TMPDIR>/ddprun-agent-\w{6}/[0-9]+\.txt.*",
        "ddprun's stack hook keeps the file faulthandler writes a hung worker's stacks into open "
        "(faulthandler writes from its signal handler, where it cannot open files)."),
    "process: parent-death signal": Deliberate(
        ALL, "0", "9 \\(SIGKILL\\)",
        "ddprun arms PR_SET_PDEATHSIG=SIGKILL in each worker, so workers die with a SIGKILLed "
        "agent; torch has no such mechanism and leaves orphans (contract 3.8)."),
}

NORMALISATION = [
    ("any value", "the run's TMPDIR -> <TMPDIR>, the probe's output dir -> <OUTDIR>, the "
                  "launcher's cwd -> <CWD> (each launcher run gets its own directories)"),
    ("MASTER_PORT", "the --master-port given -> <MASTER_PORT_ARG>; the rendezvous endpoint's "
                    "port -> <RDZV_PORT>; any other port number -> <PORT>"),
    ("MASTER_ADDR", "socket.getfqdn() -> <FQDN>; socket.gethostname() -> <HOSTNAME>; IP "
                    "literals and other names are kept"),
    ("TORCHELASTIC_RUN_ID", "the --rdzv-id given -> <RDZV_ID>; a UUID -> <UUID>; 16 hex digits "
                            "-> <HEX16>"),
    ("TORCHELASTIC_ERROR_FILE", "<dir>/attempt_<n>/<local rank>/error.json with <dir> under "
                                "TMPDIR -> <TMPDIR>/.../attempt_<n>/<local rank>/error.json (the "
                                "base directory's name is launcher-specific)"),
    ("argv", "the output directory argument -> <OUTDIR>"),
    ("process facts", "pids, tty numbers, pipe/socket inode numbers become classes: own / "
                      "launcher's / the caller's tty / pipe / socket ..."),
]


# ------------------------------------------------------------------------------------------------
# Processes: every launcher runs in its own session; everything we start carries a unique token
# in its environment, so stragglers (workers in their own sessions included) can be found.

class Processes:
    def __init__(self):
        self.token = uuid.uuid4().hex
        self.popens = []

    def spawn(self, argv, **kwargs):
        proc = subprocess.Popen(argv, start_new_session=True, **kwargs)
        self.popens.append(proc)
        return proc

    @staticmethod
    def kill_group(proc, sig):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)

    def stop(self, procs, grace=3.0):
        """SIGTERM, then SIGKILL, the process groups of launchers still running. Only groups whose
        leader is not reaped yet are signalled (a reaped pid may belong to someone else by now);
        what is left of a group after its leader exited is found by stragglers()."""
        alive = [p for p in procs if p.poll() is None]
        for p in alive:
            self.kill_group(p, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for p in alive:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
        for p in alive:
            if p.poll() is None:
                self.kill_group(p, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(timeout=5)

    def stragglers(self):
        """Kill (SIGKILL) every process carrying our token; returns their descriptions."""
        needle = ("DDPRUN_PROBE_RUN=%s" % self.token).encode()
        found = []
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == os.getpid():
                continue
            try:
                with open("/proc/%s/environ" % name, "rb") as f:
                    if needle not in f.read().split(b"\0"):
                        continue
                with open("/proc/%s/cmdline" % name, "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
            except OSError:
                continue
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(name), signal.SIGKILL)
            found.append("pid %s: %s" % (name, cmd[:160]))
        return found

    def cleanup(self):
        self.stop(self.popens, grace=1.0)
        self.stragglers()


# ------------------------------------------------------------------------------------------------
# Ports


@contextlib.contextmanager
def standalone_port_guard(active, timeout):
    """torch 1.13 --standalone always binds localhost:29400 and, if that is busy, silently joins
    the other job's store (contract 3.10). Serialise our own runs and wait for the port."""
    if not active:
        yield
        return
    path = os.path.join(tempfile.gettempdir(), "ddprun-env-compare-%d.lock" % TORCH113_STANDALONE_PORT)
    with open(path, "a") as lock:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise RuntimeError("another env_compare run holds %s" % path)
                time.sleep(0.2)
        while not bindable(TORCH113_STANDALONE_PORT):
            if time.monotonic() > deadline:
                raise RuntimeError("port %d is busy: torchrun 1.13 --standalone would join another "
                                   "job's store (contract 3.10)" % TORCH113_STANDALONE_PORT)
            time.sleep(0.5)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


# ------------------------------------------------------------------------------------------------
# Scenarios

def scenario_agents(scenario, ports, rdzv_id):
    """[(options, ...)] per agent; an option is (dashed name, value or None)."""
    common = [("nproc-per-node", "2"), ("monitor-interval", "0.1")]
    if scenario == "standalone":
        return [[("standalone", None)] + common]
    if scenario == "static":
        return [[("nnodes", "1")] + common + [("master-port", str(ports["master"]))]]
    if scenario == "c10d-2nodes":
        agent = [("nnodes", "2")] + common + [
            ("rdzv-backend", "c10d"), ("rdzv-endpoint", "127.0.0.1:%d" % ports["rdzv"]),
            ("rdzv-id", rdzv_id)]
        return [agent, list(agent)]
    raise ValueError(scenario)


def spell(options, underscore):
    argv = []
    for name, value in options:
        argv.append("--" + (name.replace("-", "_") if underscore else name))
        if value is not None:
            argv.append(value)
    return argv


# ------------------------------------------------------------------------------------------------
# Running one launcher in one scenario

@dataclasses.dataclass
class Run:
    kind: str                 # "torchrun" or "ddprun"
    label: str
    scenario: str
    root: str
    out_dir: str
    tmp_dir: str
    cwd: str
    ports: dict
    rdzv_id: str
    base_env: dict
    expected_workers: int
    nnodes: int
    nproc: int
    stdin_name: str = None
    agents: list = dataclasses.field(default_factory=list)  # dicts: argv, pid, rc, out, err
    seconds: float = 0.0
    timed_out: bool = False
    records: dict = dataclasses.field(default_factory=dict)  # rank -> probe record
    leftovers: list = dataclasses.field(default_factory=list)
    errors: list = dataclasses.field(default_factory=list)

    @property
    def ok(self):
        return not self.errors


def base_environment(token, args, tmp_dir, cwd):
    env = {k: v for k, v in os.environ.items()
           if k not in SCRUB and not k.startswith(SCRUB_PREFIXES)}
    env.update(CALLER_VARS)
    env["DDPRUN_PROBE_RUN"] = token
    env["TMPDIR"] = tmp_dir
    env["PWD"] = cwd
    if args.python_exec:
        env["PYTHON_EXEC"] = args.python_exec
    return env


def run_launcher(kind, label, prefix, scenario, work, args, procs, stdin_fd, stdin_name):
    root = os.path.join(work, kind, scenario)
    out_dir, tmp_dir, cwd = (os.path.join(root, d) for d in ("out", "tmp", "cwd"))
    for d in (out_dir, tmp_dir, cwd):
        os.makedirs(d)
    ports = {"rdzv": free_port(), "master": None}
    ports["master"] = free_port(taken=(ports["rdzv"],))
    rdzv_id = "envcmp-%s" % uuid.uuid4().hex[:8]
    agents = scenario_agents(scenario, ports, rdzv_id)
    nproc = 2
    run = Run(kind=kind, label=label, scenario=scenario, root=root, out_dir=out_dir,
              tmp_dir=tmp_dir, cwd=cwd, ports=ports, rdzv_id=rdzv_id,
              base_env=base_environment(procs.token, args, tmp_dir, cwd),
              expected_workers=len(agents) * nproc, nnodes=len(agents), nproc=nproc,
              stdin_name=stdin_name)
    started = []
    guard = kind == "torchrun" and scenario == "standalone"
    with standalone_port_guard(guard, args.overall.cap(args.timeout)):
        t0 = time.monotonic()
        try:
            for i, options in enumerate(agents):
                argv = prefix + spell(options, underscore=(kind == "torchrun")) + [
                    PROBE, out_dir] + SCRIPT_ARGS
                out_path = os.path.join(root, "agent%d.stdout" % i)
                err_path = os.path.join(root, "agent%d.stderr" % i)
                with open(out_path, "wb") as out, open(err_path, "wb") as err:
                    proc = procs.spawn(argv, env=run.base_env, cwd=cwd, stdin=stdin_fd,
                                       stdout=out, stderr=err)
                started.append(proc)
                run.agents.append({"argv": argv, "pid": proc.pid, "rc": None,
                                   "out": out_path, "err": err_path})
            deadline = t0 + args.overall.cap(args.timeout)
            for agent, proc in zip(run.agents, started):
                try:
                    agent["rc"] = proc.wait(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    run.timed_out = True
            run.seconds = time.monotonic() - t0
            if run.timed_out:  # where it stands, before the launchers are stopped
                run.errors.append("the process tree at the timeout:\n" +
                                  process_tree([p.pid for p in started]).rstrip())
        finally:
            procs.stop(started)
            for agent, proc in zip(run.agents, started):
                agent["rc"] = proc.returncode if agent["rc"] is None else agent["rc"]
    run.leftovers = procs.stragglers()
    if run.timed_out:
        run.errors.insert(0, "timed out after %.0f s (launchers killed)" % run.seconds)
    for i, agent in enumerate(run.agents):
        if agent["rc"] != 0 and not run.timed_out:
            run.errors.append("agent %d exited with %s" % (i, agent["rc"]))
    if run.leftovers:
        run.errors.append("processes left behind after the launcher exited (killed): %s"
                          % "; ".join(run.leftovers))
    for name in sorted(os.listdir(out_dir)):
        m = re.fullmatch(r"rank(\d+)\.json", name)
        if not m:
            if not name.startswith("."):
                run.errors.append("unexpected probe output %s" % name)
            continue
        with open(os.path.join(out_dir, name), encoding="utf-8", errors="surrogateescape") as f:
            run.records[int(m.group(1))] = json.load(f)
    if len(run.records) != run.expected_workers:
        run.errors.append("expected %d worker records, got %d (%s)" % (
            run.expected_workers, len(run.records), sorted(run.records)))
    return run


# ------------------------------------------------------------------------------------------------
# Normalisation

UUID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _fqdn_names():
    names = {}
    with contextlib.suppress(OSError):
        names[socket.gethostname()] = "<HOSTNAME>"
    with contextlib.suppress(OSError):
        names[socket.getfqdn(socket.gethostname())] = "<FQDN>"
    with contextlib.suppress(OSError):
        names[socket.getfqdn()] = "<FQDN>"
    return names


HOST_NAMES = _fqdn_names()


def replace_paths(value, run):
    for path, placeholder in sorted(((run.out_dir, "<OUTDIR>"), (run.tmp_dir, "<TMPDIR>"),
                                     (run.cwd, "<CWD>")), key=lambda p: -len(p[0])):
        value = value.replace(path, placeholder)
    return value


def normalise_env(name, value, run):
    if value is None:
        return ABSENT
    v = replace_paths(value, run)
    if name == "MASTER_PORT" and v.isdigit():
        port = int(v)
        if port == run.ports["master"] and run.scenario == "static":
            return "<MASTER_PORT_ARG>"
        if port == run.ports["rdzv"] and run.scenario == "c10d-2nodes":
            return "<RDZV_PORT>"
        return "<PORT>"
    if name == "MASTER_ADDR":
        return HOST_NAMES.get(v, v)
    if name == "TORCHELASTIC_RUN_ID":
        if v == run.rdzv_id:
            return "<RDZV_ID>"
        if UUID_RE.fullmatch(v):
            return "<UUID>"
        if re.fullmatch(r"[0-9a-f]{16}", v):
            return "<HEX16>"
        return v
    if name == "TORCHELASTIC_ERROR_FILE":
        m = re.fullmatch(r"(.*)/attempt_(\d+)/(\d+)/error\.json", v)
        if m:
            base = "<TMPDIR>/..." if m.group(1).startswith("<TMPDIR>/") else m.group(1)
            return "%s/attempt_%s/%s/error.json" % (base, m.group(2), m.group(3))
    return v


def env_changes(record, run):
    """name -> raw value (None when removed) for everything the launcher added/changed/removed."""
    env = record["environ"]
    changes = {k: v for k, v in env.items() if run.base_env.get(k) != v}
    changes.update({k: None for k in run.base_env if k not in env})
    return changes


def env_value(name, record, run):
    env = record["environ"]
    if name not in env:
        return REMOVED if name in run.base_env else ABSENT
    if run.base_env.get(name) == env[name]:
        return "(inherited) " + replace_paths(env[name], run)
    return normalise_env(name, env[name], run)


def _signal_names(hexmask):
    try:
        mask = int(hexmask, 16)
    except (TypeError, ValueError):
        return str(hexmask)
    names = []
    for sig in range(1, 65):
        if mask & (1 << (sig - 1)):
            try:
                names.append(signal.Signals(sig).name)
            except ValueError:
                names.append(str(sig))
    return ",".join(names) or "none"


def _fd_class(target, run, stream):
    if target is None:
        return "closed"
    if stream is not None:
        agent_files = {a[stream] for a in run.agents}
        if target in agent_files:
            return "launcher's " + ("stdout" if stream == "out" else "stderr")
    if re.fullmatch(r"pipe:\[\d+\]", target):
        return "pipe"
    if re.fullmatch(r"socket:\[\d+\]", target):
        return "socket"
    if target.startswith("anon_inode:"):
        return target
    if run.stdin_name and target == run.stdin_name:
        return "the caller's tty"
    if re.fullmatch(r"/dev/pts/\d+", target):
        return "a tty"
    return replace_paths(target, run)


def _command_options(record):
    """Interpreter options between the interpreter and the script (e.g. ["-u"])."""
    cmd = record.get("orig_argv") or record.get("cmdline") or []
    if PROBE in cmd:
        return cmd[1:cmd.index(PROBE)]
    return None


def process_facts(record, run):
    pid, sid, pgid, ppid = record["pid"], record["sid"], record["pgid"], record["ppid"]
    launchers = {a["pid"] for a in run.agents}

    def who(value):
        if value == pid:
            return "own"
        if value in launchers:
            return "launcher's"
        return "other"

    fds = record.get("fds") or {}
    extra = sorted(_fd_class(t, run, None) for fd, t in fds.items() if int(fd) > 2)
    argv = [replace_paths(a, run) for a in record["argv"]]
    options = _command_options(record)
    executable = record.get("executable")
    if executable and executable == run.base_env.get("PYTHON_EXEC"):
        executable = "$PYTHON_EXEC"
    pdeath = record.get("pdeathsig")
    if pdeath:
        with contextlib.suppress(ValueError):
            pdeath = "%d (%s)" % (pdeath, signal.Signals(pdeath).name)
    signals = record.get("signals") or {}
    return {
        "argv": json.dumps(argv[1:], ensure_ascii=False),
        "script path (argv[0])": "<probe>" if record["argv"][0] == PROBE else argv[0],
        "interpreter": str(executable),
        "interpreter options": " ".join(options) if options is not None else "<script not found>",
        "cwd": "<launcher's cwd>" if record["cwd"] == run.cwd else replace_paths(record["cwd"], run),
        "parent": "launcher" if ppid in launchers else "other",
        "session / process group": "sid=%s pgid=%s" % (who(sid), who(pgid)),
        "stdin": "%s (isatty=%s)" % (_fd_class(record.get("stdin_target"), run, None),
                                     record.get("stdin_isatty")),
        "stdout / stderr": "%s / %s" % (_fd_class(fds.get("1"), run, "out"),
                                        _fd_class(fds.get("2"), run, "err")),
        "extra open descriptors": ", ".join(extra) or "none",
        "blocked signals": _signal_names(signals.get("SigBlk")),
        "ignored signals": _signal_names(signals.get("SigIgn")),
        "parent-death signal": str(pdeath),
        "umask": "%04o" % record["umask"] if isinstance(record.get("umask"), int) else "?",
        "rlimits": json.dumps(record.get("rlimits"), sort_keys=True),
        "error file directory exists": str(record.get("error_file_dir_exists")),
    }


# ------------------------------------------------------------------------------------------------
# Checks

def _int(env, name):
    try:
        return int(env.get(name, ""))
    except ValueError:
        return None


def invariants(run):
    problems = []
    n = run.expected_workers
    if sorted(run.records) != list(range(n)):
        problems.append("ranks %s, expected 0..%d" % (sorted(run.records), n - 1))
    shared = {}
    by_group = {}
    for rank, rec in sorted(run.records.items()):
        env = rec["environ"]
        want = {"WORLD_SIZE": n, "LOCAL_WORLD_SIZE": run.nproc, "GROUP_WORLD_SIZE": run.nnodes,
                "ROLE_WORLD_SIZE": n, "ROLE_RANK": rank, "RANK": rank,
                "TORCHELASTIC_RESTART_COUNT": 0, "TORCHELASTIC_MAX_RESTARTS": 0}
        for name, value in want.items():
            if _int(env, name) != value:
                problems.append("rank %d: %s=%r, expected %d" % (rank, name, env.get(name), value))
        lr, gr = _int(env, "LOCAL_RANK"), _int(env, "GROUP_RANK")
        if lr is None or gr is None or rank != gr * run.nproc + lr or not 0 <= lr < run.nproc:
            problems.append("rank %d: GROUP_RANK=%r LOCAL_RANK=%r do not give it" % (
                rank, env.get("GROUP_RANK"), env.get("LOCAL_RANK")))
        for name in ("MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID", "ROLE_NAME"):
            shared.setdefault(name, set()).add(env.get(name))
        by_group.setdefault(gr, set()).add(rec["ppid"])
        if rec["argv"][1:2] != [run.out_dir]:
            problems.append("rank %d: argv[1:2] is %r, not the output directory" % (rank, rec["argv"][1:2]))
    for name, values in shared.items():
        if len(values) != 1:
            problems.append("%s differs between ranks: %s" % (name, sorted(map(str, values))))
    pids = [r["pid"] for r in run.records.values()]
    if len(set(pids)) != len(pids):
        problems.append("two workers share a pid")
    files = [r["environ"].get("TORCHELASTIC_ERROR_FILE") for r in run.records.values()]
    if len(set(files)) != len(files):
        problems.append("TORCHELASTIC_ERROR_FILE is not unique per worker")
    parents = [p for ps in by_group.values() for p in ps]
    if any(len(ps) != 1 for ps in by_group.values()) or len(set(parents)) != len(parents):
        problems.append("workers of one agent do not share a parent (group rank -> ppids %s)"
                        % {k: sorted(v) for k, v in by_group.items()})
    return problems


def argv_semantics(run):
    """How the script arguments arrived: verbatim, torchrun's ${local_rank} macro, or otherwise."""
    kinds = set()
    for rec in run.records.values():
        got = rec["argv"][2:]
        lr = rec["environ"].get("LOCAL_RANK", "")
        macro = [string.Template(a).safe_substitute(local_rank=lr) for a in SCRIPT_ARGS]
        kinds.add("verbatim" if got == SCRIPT_ARGS else
                  "verbatim except torchrun's ${local_rank} macro" if got == macro else
                  "MANGLED: %r" % (got,))
    return "; ".join(sorted(kinds))


def caller_vars_check(run):
    problems = []
    for rank, rec in sorted(run.records.items()):
        env = rec["environ"]
        for name, value in CALLER_VARS.items():
            if env.get(name) != value:
                problems.append("rank %d: %s=%r, caller set %r" % (rank, name, env.get(name), value))
        for name, value in env_changes(rec, run).items():
            if name in run.base_env:
                problems.append("rank %d: inherited %s %s" % (
                    rank, name, "removed" if value is None else "changed to %r" % value))
    return problems


# ------------------------------------------------------------------------------------------------
# Comparison

SAME, DELIB, DIFF, MISMATCH = "same", "deliberate", "DIFFERENT", "TABLE MISMATCH"
ADDED, CHANGED, GONE, EXPECTED = "added", "changed", "removed", "as table"


def per_rank(values):
    """One cell: the value if all ranks agree, else the values in rank order."""
    distinct = list(dict.fromkeys(values))
    return distinct[0] if len(distinct) == 1 else " / ".join(values)


def compare_rows(scenario, tr, dd):
    """[(key, torchrun cell, ddprun cell, status, note)] for env variables and process facts."""
    ranks = sorted(set(tr.records) & set(dd.records))
    names = set()
    for run in (tr, dd):
        for rec in run.records.values():
            names.update(env_changes(rec, run))
    names.update(k for k, d in DELIBERATE_DIFFERENCES.items()
                 if not k.startswith("process: ") and scenario in d.scenarios)
    rows = []
    keys = [(n, "env") for n in sorted(names)]
    facts_tr = {r: process_facts(tr.records[r], tr) for r in ranks}
    facts_dd = {r: process_facts(dd.records[r], dd) for r in ranks}
    if ranks:
        keys += [("process: " + f, f) for f in facts_tr[ranks[0]]]
    for key, fact in keys:
        if fact == "env":
            tv = [env_value(key, tr.records[r], tr) for r in ranks]
            dv = [env_value(key, dd.records[r], dd) for r in ranks]
        else:
            tv = [facts_tr[r][fact] for r in ranks]
            dv = [facts_dd[r][fact] for r in ranks]
        entry = DELIBERATE_DIFFERENCES.get(key)
        applies = entry is not None and scenario in entry.scenarios
        status, note = SAME, ""
        for t, d in zip(tv, dv):
            if applies:
                if t != d and re.fullmatch(entry.torchrun, t) and re.fullmatch(entry.ddprun, d):
                    st = DELIB
                else:
                    st = MISMATCH
                    note = "table expects torchrun ~ %r, ddprun ~ %r%s" % (
                        entry.torchrun, entry.ddprun, "; both are the same" if t == d else "")
            else:
                st = SAME if t == d else DIFF
            status = max(status, st, key=[SAME, DELIB, DIFF, MISMATCH].index)
        rows.append((key, per_rank(tv), per_rank(dv), status, note))
    return rows


def single_rows(scenario, run, check_table):
    """[(key, value cell, status, note)]: what one launcher set, for --only. With check_table,
    the launcher's side of every applicable DELIBERATE_DIFFERENCES entry is checked too."""
    ranks = sorted(run.records)
    names = set()
    for rec in run.records.values():
        names.update(env_changes(rec, run))
    rows = []
    for name in sorted(names):
        values = [env_value(name, run.records[r], run) for r in ranks]
        kinds = set()
        for r in ranks:
            env = run.records[r]["environ"]
            kinds.add(GONE if name not in env else CHANGED if name in run.base_env else ADDED)
        rows.append([name, per_rank(values), "/".join(sorted(kinds)), ""])
    facts = {r: process_facts(run.records[r], run) for r in ranks}
    for fact in (facts[ranks[0]] if ranks else {}):
        rows.append(["process: " + fact, per_rank([facts[r][fact] for r in ranks]), "", ""])
    if check_table:
        for row in rows:
            entry = DELIBERATE_DIFFERENCES.get(row[0])
            if entry and scenario in entry.scenarios:
                row[2] = (row[2] + " " if row[2] else "") + EXPECTED
        for key, entry in DELIBERATE_DIFFERENCES.items():
            if scenario not in entry.scenarios:
                continue
            pattern = entry.torchrun if run.kind == "torchrun" else entry.ddprun
            if key.startswith("process: "):
                values = [facts[r][key[len("process: "):]] for r in ranks]
            else:
                values = [env_value(key, run.records[r], run) for r in ranks]
            if not all(re.fullmatch(pattern, v) for v in values):
                row = next((r for r in rows if r[0] == key), None)
                if row is None:
                    row = [key, per_rank(values), "", ""]
                    rows.append(row)
                row[2], row[3] = MISMATCH, "table expects %s ~ %r" % (run.kind, pattern)
    return [tuple(r) for r in rows]


def table(headers, rows, width=64):
    """A plain-text table; cells are cut at `width` characters except in the last column."""
    def cut(s, last):
        s = str(s).replace("\n", "\\n").replace("\t", "\\t")
        return s if last or len(s) <= width else s[:width - 1] + "\u2026"
    rows = [[cut(c, i == len(r) - 1) for i, c in enumerate(r)] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(headers)]
    line = lambda cells: " | ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()
    out = [line(headers), "-+-".join("-" * w for w in widths)]
    out += [line(r) for r in rows]
    return "\n".join(out)


# ------------------------------------------------------------------------------------------------
# Main

def torch_version(prefix, timeout):
    try:
        probe = subprocess.run([prefix[0], "-c", "import torch, sys; sys.stdout.write(torch.__version__)"],
                               capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, str(e)
    if probe.returncode != 0:
        return None, (probe.stderr.strip().splitlines() or ["exit %d" % probe.returncode])[-1]
    return probe.stdout.strip(), None


def describe_run(run):
    rcs = ", ".join(str(a["rc"]) for a in run.agents)
    return "%s: %.2f s, exit %s%s" % (run.label, run.seconds, rcs,
                                       " (TIMED OUT)" if run.timed_out else "")


def print_failed_run(run, say):
    say("  %s FAILED:" % run.label)
    for e in run.errors:
        say("    - " + e)
    for i, agent in enumerate(run.agents):
        say("    agent %d: %s" % (i, " ".join(shlex.quote(a) for a in agent["argv"])))
        for path in (agent["out"], agent["err"]):
            with contextlib.suppress(OSError):
                with open(path, errors="replace") as f:
                    tail = f.read()[-1500:]
                if tail.strip():
                    say("    --- %s (tail) ---" % os.path.basename(path))
                    say("\n".join("    " + l for l in tail.rstrip().splitlines()))


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="Compare the worker environment of ddprun with torchrun's.",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--scenario", action="append", choices=SCENARIOS + ("all",),
                        help="scenario to run (repeatable; default: all)")
    parser.add_argument("--ddprun", default=DEFAULT_DDPRUN, help="ddprun binary (default: %(default)s)")
    parser.add_argument("--torchrun", default=DEFAULT_TORCHRUN,
                        help="torchrun command; its first word must be a Python with torch "
                             "(default: %(default)s)")
    parser.add_argument("--only", choices=("torchrun", "ddprun"),
                        help="run one launcher and print what it set (no comparison)")
    parser.add_argument("--keep", metavar="DIR", help="keep all records and logs in DIR "
                        "(must not exist or be empty); default: a temp dir, removed on success")
    parser.add_argument("--python-exec", default="/usr/bin/python3",
                        help="PYTHON_EXEC for both launchers, so both run the probe with the same "
                             "interpreter; '' leaves it unset (default: %(default)s)")
    parser.add_argument("--stdin", choices=("pty", "devnull"), default="pty",
                        help="what the launchers get as stdin (default: a pty, to see that a tty "
                             "reaches the workers)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                        help="seconds per launcher run and per helper command (default: %(default)s)")
    parser.add_argument("--budget", type=float, default=DEFAULT_BUDGET,
                        help="seconds for everything: no run waits past it (default: %(default)s)")
    parser.add_argument("--verbose", action="store_true", help="also print raw per-rank values")
    args = parser.parse_args(argv)
    args.overall = Deadline(args.budget)
    scenarios = [s for s in SCENARIOS if not args.scenario or "all" in args.scenario
                 or s in args.scenario]

    torchrun_prefix = shlex.split(args.torchrun)
    kinds = [args.only] if args.only else ["torchrun", "ddprun"]
    labels = {"ddprun": "ddprun"}
    if "torchrun" in kinds:
        version, why = torch_version(torchrun_prefix, args.overall.cap(args.timeout))
        if version is None:
            print("skipped: %s cannot import torch (%s)" % (torchrun_prefix[0], why))
            return SKIP
        labels["torchrun"] = "torchrun " + version
    else:
        version = None
    if "ddprun" in kinds and not (os.path.isfile(args.ddprun) and os.access(args.ddprun, os.X_OK)):
        print("error: no ddprun binary at %s (build it, pass --ddprun, or use --only torchrun)"
              % args.ddprun)
        return 1
    table_is_for_this_torch = version is None or version.startswith("1.13")
    prefixes = {"torchrun": torchrun_prefix, "ddprun": [args.ddprun]}

    if args.keep:
        work = os.path.abspath(args.keep)
        os.makedirs(work, exist_ok=True)
        if os.listdir(work):
            print("error: --keep %s is not empty" % work)
            return 2
    else:
        work = tempfile.mkdtemp(prefix="ddprun-env-compare-")

    lines = []

    def say(text=""):
        print(text, flush=True)
        lines.append(text)

    procs = Processes()
    failed = False
    completed = False
    stdin_fd, stdin_name, pty_fds = subprocess.DEVNULL, None, ()
    if args.stdin == "pty":
        try:
            master, slave = os.openpty()
            pty_fds = (master, slave)
            stdin_fd, stdin_name = slave, os.ttyname(slave)
        except OSError as e:
            say("note: no pty (%s); the launchers get /dev/null as stdin" % e)

    def on_signal(signum, _frame):
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    try:
        say("env_compare: %s; probe %s" % (" vs ".join(labels[k] for k in kinds), PROBE))
        say("script args: %s" % " ".join(shlex.quote(a) for a in SCRIPT_ARGS))
        say("work dir: %s" % work)
        for scenario in scenarios:
            say()
            say("=" * 100)
            say("scenario %s" % scenario)
            runs = {}
            for kind in kinds:
                try:
                    runs[kind] = run_launcher(kind, labels[kind], prefixes[kind], scenario, work,
                                              args, procs, stdin_fd, stdin_name)
                except RuntimeError as e:
                    say("  %s: cannot run: %s" % (labels[kind], e))
                    failed = True
                    continue
                run = runs[kind]
                say("  " + describe_run(run))
                say("  argv: " + " ".join(shlex.quote(a) for a in run.agents[0]["argv"]))
                if not run.ok:
                    print_failed_run(run, say)
                    failed = True
            if len(runs) != len(kinds) or not all(r.records for r in runs.values()):
                continue

            checks = []
            for kind, run in runs.items():
                checks.append(("%s: rank invariants" % run.label, invariants(run)))
                checks.append(("%s: caller's variables reach the workers unchanged" % run.label,
                               caller_vars_check(run)))
                opts = {" ".join(_command_options(r) or ["?"]) for r in run.records.values()}
                checks.append(("%s: workers run as <python> -u <script> (orig_argv)" % run.label,
                               [] if opts == {"-u"} else ["interpreter options %s" % sorted(opts)]))
                say("  %s: script args arrived %s" % (run.label, argv_semantics(run)))

            if args.only:
                rows = single_rows(scenario, runs[args.only], table_is_for_this_torch)
                say()
                say(table(["variable / fact", labels[args.only], "status", "note"], rows))
                failed |= any(r[2] == MISMATCH for r in rows)
            else:
                tr, dd = runs["torchrun"], runs["ddprun"]
                rows = compare_rows(scenario, tr, dd)
                say()
                say(table(["variable / fact", labels["torchrun"], "ddprun", "status", "note"], rows))
                bad = [r for r in rows if r[3] in (DIFF, MISMATCH)]
                failed |= bool(bad)
                argv_problems = []
                for rank in sorted(set(tr.records) & set(dd.records)):
                    a = [replace_paths(x, tr) for x in tr.records[rank]["argv"][1:]]
                    b = [replace_paths(x, dd) for x in dd.records[rank]["argv"][1:]]
                    if a != b:
                        argv_problems.append("rank %d: torchrun %r, ddprun %r" % (rank, a, b))
                checks.append(("argv pass-through: script args identical", argv_problems))
                checks.append(("ddprun: every worker leads its own session (sid == pid)",
                               ["rank %d: pid %d sid %d" % (r, rec["pid"], rec["sid"])
                                for r, rec in sorted(dd.records.items()) if rec["sid"] != rec["pid"]]))
                if not table_is_for_this_torch:
                    say("  note: DELIBERATE_DIFFERENCES describes torchrun 1.13; this is %s"
                        % labels["torchrun"])
            say()
            for name, problems in checks:
                say("  [%s] %s" % ("ok" if not problems else "FAIL", name))
                for p in problems:
                    say("         " + p)
                failed |= bool(problems)
            if args.verbose:
                for kind, run in runs.items():
                    say()
                    say("  raw values, %s:" % run.label)
                    for rank, rec in sorted(run.records.items()):
                        for name, value in sorted(env_changes(rec, run).items()):
                            say("    rank %d %s=%r" % (rank, name, value))
                        say("    rank %d argv=%r orig_argv=%r" % (rank, rec["argv"], rec["orig_argv"]))
        if not args.only:
            say()
            say("deliberate differences (torchrun 1.13 vs ddprun):")
            for key, entry in DELIBERATE_DIFFERENCES.items():
                say("  %s [%s]: %s" % (key, ", ".join(entry.scenarios), entry.why))
        say()
        say("RESULT: %s" % ("FAIL" if failed else "ok"))
        completed = True
    finally:
        procs.cleanup()
        for fd in pty_fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        with contextlib.suppress(OSError):
            with open(os.path.join(work, "report.txt"), "w") as f:
                f.write("\n".join(lines) + "\n")
        if not args.keep:
            if failed or not completed:
                print("kept for inspection: %s" % work)
            else:
                import shutil
                shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
