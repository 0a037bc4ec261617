"""The jobs the security drivers run (attacks_test.py, token_test.py), in one place: a job secret
on disk, a ddprun-rendezvous daemon, a two-agent c10d job on 127.0.0.1 with workers that train for
a few seconds, where its stores listen, and the checks that a job was left alone.

Every wait takes from the driver's Deadline and gives up (tests/support/jobs.py give_up) with what
it saw; every process started here leads its own session and is killed on the way out.
"""
import os
import re
import secrets
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
WORKER = os.path.join(HERE, "workers", "steady_worker.py")
sys.path.insert(0, os.path.join(REPO, "tests", "support"))
from jobs import SKIP, Deadline, Job, describe, give_up, run, torch_version, wait_all  # noqa: E402
from ports import free_port  # noqa: E402,F401  (the security tests take it from here)

# What the drivers take from here, tests/support/jobs.py's helpers included.
__all__ = ["SKIP", "ACTIVE_RUN", "Deadline", "Job", "TwoNodeJob", "describe", "free_port", "give_up",
           "key", "listening_ports", "run", "start_daemon", "torch_version", "wait_all", "wait_until",
           "write_token"]


def write_token(directory, name="token", secret=None, mode=0o600, newline=True):
    """A job secret file: `secret` (32 random hex characters by default), a newline after it
    unless told otherwise (the reader strips one), with permissions `mode`."""
    path = os.path.join(directory, name)
    secret = secrets.token_hex(16) if secret is None else secret
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(secret + ("\n" if newline else ""))
    os.chmod(path, mode)  # after writing: the umask must not decide the mode under test
    return path


def write_certificate(directory, name="store"):
    """A self-signed TLS certificate and its key (EC P-256, one day, key mode 600), made with
    the openssl command; (certificate path, key path)."""
    certificate = os.path.join(directory, name + ".crt")
    key = os.path.join(directory, name + ".key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-keyout", key, "-out", certificate,
                    "-days", "1", "-subj", "/CN=ddprun-test"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30)
    os.chmod(key, 0o600)
    return certificate, key


def listening_ports(pid):
    """The TCP ports process `pid` listens on (its sockets in LISTEN state, IPv4 and IPv6), from
    /proc: no dependency on ss. Empty when the process is gone."""
    inodes = set()
    try:
        for fd in os.listdir("/proc/%d/fd" % pid):
            try:
                target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    except OSError:
        return set()
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as rows:
                next(rows)
                for row in rows:
                    fields = row.split()
                    if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                        ports.add(int(fields[1].rsplit(":", 1)[1], 16))
        except OSError:
            continue
    return ports


def wait_until(condition, deadline, seconds, why, jobs):
    """Polls `condition` (returns something true when met) for up to `seconds` of the deadline;
    gives up with `why` and what `jobs` did otherwise."""
    end = time.monotonic() + deadline.cap(seconds)
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= end:
            give_up("%s (waited %.0f s)" % (why, seconds), jobs)
        time.sleep(0.05)


def start_daemon(binary, deadline, token_file=None, extra=()):
    """ddprun-rendezvous on a free port of 127.0.0.1 (`--token-file` when given); (job, port)."""
    argv = [binary, "--port", "0"] + (["--token-file", token_file] if token_file else []) + list(extra)
    daemon = Job(argv, name="ddprun-rendezvous")
    line = daemon.read_line(deadline.cap(20))
    if line is None or not line.startswith("listening on "):
        give_up("the daemon did not start (first line: %r)" % line, [daemon])
    return daemon, int(line.rsplit(":", 1)[1])


class TwoNodeJob:
    """Two ddprun agents on 127.0.0.1, c10d backend, `nproc` workers each.

    The rendezvous store is hosted by agent 0 on a free port (agent 1 starts once it listens,
    so which agent hosts it is known), or by a daemon at `daemon_port`. `token_file`: each agent
    gets `--rdzv-conf token_file=...` (agent 1 through PET_RDZV_CONF when `token_by_env`, so
    both ways of giving it are used). `script`: the worker command (default: steady_worker.py
    with `steps` all_reduces `pause` seconds apart)."""

    def __init__(self, ddprun, python, deadline, run_id, *, token_file=None, token_by_env=False,
                 daemon_port=None, nnodes="2", nproc=1, steps=16, pause=0.25, conf=(),
                 options=(), script=None):
        self.deadline = deadline
        self.run_id = run_id
        self.nproc = nproc
        self.steps = steps
        self.world = int(nnodes.split(":")[0]) * nproc
        self.hosted = daemon_port is None
        self.rdzv_port = free_port() if self.hosted else daemon_port
        self.also = []  # other processes to describe on giving up (a daemon)
        script = script or [WORKER, str(steps), str(pause)]
        conf_items = list(conf)
        argv = [ddprun, "--nnodes", nnodes, "--nproc-per-node", str(nproc), "--rdzv-backend", "c10d",
                "--rdzv-endpoint", "127.0.0.1:%d" % self.rdzv_port, "--rdzv-id", run_id, *options]
        self.agents = []
        for index in range(2):
            env = dict(os.environ, PYTHON_EXEC=python)
            items = (["token_file=" + token_file] if token_file else []) + list(conf_items)
            if token_file and token_by_env and index == 1:
                # All of it: a --rdzv-conf on the command line would replace PET_RDZV_CONF whole.
                env["PET_RDZV_CONF"] = ",".join(items)
                items = []
            command = argv + (["--rdzv-conf", ",".join(items)] if items else []) + script
            self.agents.append(Job(command, name="ddprun agent %d" % index, env=env))
            if index == 0 and self.hosted:
                wait_until(lambda: self.rdzv_port in listening_ports(self.agents[0].pid) or
                           self.agents[0].returncode is not None,
                           deadline, 20, "agent 0 did not start listening on its rendezvous endpoint",
                           self.jobs)

    @property
    def jobs(self):
        return self.agents + self.also

    @property
    def output(self):
        return "".join(a.output for a in self.agents)

    @property
    def errors(self):
        return "".join(a.errors for a in self.agents)

    def give_up(self, why):
        give_up(why, self.jobs)

    def lines(self, pattern):
        """The matches of `pattern` against whole worker lines, whatever the agent's line prefix
        ("[default0]:" with several workers per node, none with one)."""
        return list(re.finditer(r"^(?:\[[^\]\n]*\]:)?" + pattern + "$", self.output, re.M))

    def ranks_at(self, pattern):
        """The ranks whose workers printed a line matching `pattern` (with a group named rank)."""
        return {int(m.group("rank")) for m in self.lines(pattern)}

    def wait_training(self, step=1, seconds=90):
        """Until every rank of the current world has done `step` all_reduces (the round's workers
        are up, in the process group, and training)."""
        wanted = set(range(self.world))
        wait_until(lambda: wanted <= self.ranks_at(r"rank (?P<rank>\d+) step %d" % step),
                   self.deadline, seconds, "the workers did not reach step %d" % step, self.jobs)

    def worker_envs(self):
        """[(rank, {"MASTER_ADDR": ..., "MASTER_PORT": ..., ...})], one per worker started, from
        the workers' env lines (every round's; the agents' outputs one after the other)."""
        return [(int(m.group(1)), dict(item.split("=", 1) for item in m.group(2).split()))
                for m in self.lines(r"rank (\d+) env: (.*)")]

    def worker_store_port(self):
        """The real port of the workers' store, hosted by one of the agents: a port an agent listens
        on that is neither the rendezvous endpoint nor a port its workers were given (with a token
        the workers are given their agent's relay; without one, the store itself, which the
        round's master record names too)."""
        given = {int(e["MASTER_PORT"]) for _, e in self.worker_envs() if e.get("MASTER_PORT", "").isdigit()}
        ports = set()
        for agent in self.agents:
            ports |= listening_ports(agent.pid)
        ports.discard(self.rdzv_port)
        hidden = ports - given
        if len(hidden) == 1:
            return hidden.pop()
        if not hidden and len(given) == 1 and given <= ports:
            return next(iter(given))  # no relay: the workers reach the store itself
        self.give_up("cannot tell the workers' store among the agents' listening ports %s (workers "
                     "were given %s)" % (sorted(ports), sorted(given)))

    def relay_ports(self):
        """The ports the workers were given that are not the workers' store itself: with a token,
        their agents' relays (loopback, for workers that hold no token)."""
        store = self.worker_store_port()
        return sorted({int(e["MASTER_PORT"]) for _, e in self.worker_envs()
                       if e.get("MASTER_PORT", "").isdigit()} - {store})

    def finish(self, what):
        wait_all(self.agents, self.deadline, what, also=self.also)

    def check_unaffected(self, label):
        """The job trained to the end in its first round: both agents exit 0, every rank printed
        its last line with restart 0, and no agent re-formed or restarted the job."""
        self.finish(label)
        codes = [a.returncode for a in self.agents]
        if codes != [0, 0]:
            self.give_up("%s: the agents exited %s, not [0, 0]" % (label, codes))
        done = self.ranks_at(r"rank (?P<rank>\d+): trained %d steps \(restart 0\)" % self.steps)
        if done != set(range(self.world)):
            self.give_up("%s: ranks %s finished training, not all %d" % (label, sorted(done), self.world))
        for sign in ("restarting the job", "re-forming", "was lost", "left the job"):
            if sign in self.errors:
                self.give_up("%s: the agents say %r: the job was disturbed" % (label, sign))
        starts = self.lines(r"rank (?P<rank>\d+) env: .*")
        if len(starts) != self.world or len({m.group("rank") for m in starts}) != self.world:
            self.give_up("%s: workers were started more than once (a re-formed round)" % label)

    def kill(self):
        for job in self.jobs:
            job.kill()


def key(run_id, suffix):
    """A key of ddprun's rendezvous as it is on the wire (membership.cc: "ddprun/<run id>/..."
    under the client's "/")."""
    return "/ddprun/%s/%s" % (run_id, suffix)


ACTIVE_RUN = "/ddprun/active_run"
