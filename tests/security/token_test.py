#!/usr/bin/env python3
"""The job secret (--rdzv-conf token_file=PATH, PET_RDZV_CONF, ddprun-rendezvous --token-file)
from the outside: torch's own clients are refused, a real DDP job trains through a protected
daemon, and every bad secret is a quick exit 2 with one line saying what to fix.

    token_test.py --ddprun BIN --rendezvous BIN --scenario NAME [--python PY]

With torch (PY: /usr/bin/python3 = torch 1.13, or scripts/torch2-python = torch 2.6; exit 77 =
skipped when it is missing):
  torch-client-daemon  torch's TCPStore client is refused (an exception within seconds, no hang)
                       by ddprun-rendezvous --token-file
  torch-client-agent   ... and by both stores of a token-protected job mid-training (the
                       rendezvous store on its endpoint, the workers' store on its real port),
                       which trains on undisturbed (agent 1 gets the token through PET_RDZV_CONF)
  ddp-daemon           examples/train_ddp.py, 2 agents x 2 workers, through a protected daemon
                       (the daemon's file ends in a newline, the agents' does not: the same secret)
  ddp-tls-agent        the same with TLS (tls_cert, tls_key) on the stores the agents host
  ddp-tls-daemon       the same through ddprun-rendezvous --token-file --tls-cert --tls-key
  relay-handoff        workers' store connections skip the relay (the agent hands each a proven
                       connection to the store) and work; without DDPRUN_RELAY_HANDOFF, the relay
Without torch (the secret's handling; PY only runs a no-op worker):
  wrong-token          an agent with another secret: exit 2 within seconds, one line (token, refused)
  missing-token        an agent with no secret against a protected daemon: exit 2, one line (token)
  file-mode            a secret readable by group or others: agent and daemon exit 2 naming chmod 600
  missing-file         a token file that does not exist: daemon and agent exit 2, one line naming it
  short-token          a secret under 16 bytes (15 and a newline): agent and daemon exit 2
  tls-untrusted        an agent whose certificate did not sign the TLS daemon's: exit 2, one line
  tls-needs-token      TLS files without token_file: exit 2, one line naming token_file
Against another user of the node (run by local_files_test.py as token-other-owner, token-fifo):
  other_owner          a mode-600 token file another user owns: agent and daemon exit 2, one line
  token_fifo           a FIFO at the token path: agent and daemon exit 2 at once (not blocked), one line
"""
import argparse
import os
import re
import shutil
import socket
import ssl
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from secjobs import (REPO, SKIP, Deadline, Job, TwoNodeJob, free_port, give_up,  # noqa: E402
                     start_daemon, torch_version, write_certificate, write_token)

TORCH_SCENARIOS = ["torch-client-daemon", "torch-client-agent", "ddp-daemon", "ddp-tls-agent",
                   "ddp-tls-daemon", "relay-handoff"]
PLAIN_SCENARIOS = ["wrong-token", "missing-token", "file-mode", "missing-file", "short-token",
                   "tls-untrusted", "tls-needs-token"]
PROBE = os.path.join(HERE, "workers", "torch_store_probe.py")
NOOP = os.path.join(HERE, "workers", "noop_worker.py")
HANDOFF = os.path.join(HERE, "workers", "handoff_worker.py")
EXAMPLE = os.path.join(REPO, "examples", "train_ddp.py")
# "Within a few seconds": a refusal or a bad-input exit, from start to exit.
QUICK = 10
# torch's client timeout in the probe; it retries until then (2.x), so allow that and start-up.
PROBE_TIMEOUT = 5
PROBE_LIMIT = 30


class Scenario:
    def __init__(self, args, deadline):
        self.args = args
        self.deadline = deadline
        self.work = tempfile.mkdtemp(prefix="ddprun-token-")
        self.jobs = []

    def track(self, job):
        self.jobs.append(job)
        return job

    def fail(self, why):
        give_up(why, self.jobs)

    def daemon(self, token_file, extra=()):
        daemon, port = start_daemon(self.args.rendezvous, self.deadline, token_file=token_file,
                                    extra=extra)
        self.track(daemon)
        return port

    def torch_probe(self, port, what):
        """torch's TCPStore client (under --python) against `port`: must raise, within seconds."""
        probe = self.track(Job([self.args.python, PROBE, "127.0.0.1", str(port), str(PROBE_TIMEOUT)],
                               name="torch client -> %s" % what))
        return probe

    def check_probe(self, probe, what):
        if probe.wait(self.deadline.cap(PROBE_LIMIT + 30)) is None:
            self.fail("torch's client against the %s hangs" % what)
        line = probe.output.strip().splitlines()[-1:] or [""]
        took = re.search(r"after ([0-9.]+) s$", line[0])
        if probe.returncode != 0 or not line[0].startswith("refused: ") or not took:
            self.fail("torch's client against the %s was not refused (exit %s): %s" %
                      (what, probe.returncode, line[0] or probe.errors[-2000:]))
        if float(took.group(1)) > PROBE_LIMIT:
            self.fail("torch's client against the %s was refused only after %s s" % (what, took.group(1)))
        print("torch client -> %s: %s" % (what, line[0]))
        return line[0]

    def agent(self, token_file, endpoint_port, nnodes="2", name="agent", conf=()):
        """One agent of a job that runs a no-op worker; `token_file` None: no secret given.
        `conf`: more --rdzv-conf items."""
        items = (["token_file=" + token_file] if token_file else []) + list(conf)
        conf = ["--rdzv-conf", ",".join(items)] if items else []
        argv = [self.args.ddprun, "--nnodes", nnodes, "--nproc-per-node", "1", "--rdzv-backend", "c10d",
                "--rdzv-endpoint", "127.0.0.1:%d" % endpoint_port, "--rdzv-id", "token-%d" % os.getpid(),
                *conf, NOOP]
        return self.track(Job(argv, name=name, env=dict(os.environ, PYTHON_EXEC=self.args.python)))

    def refused_quickly(self, job, words, what, names=None):
        """`job` exits 2 within QUICK seconds of starting with one stderr line holding every one
        of `words` (case-insensitive; `names`: one of these too, e.g. the file's path), and ran
        no worker."""
        started = time.monotonic()
        code = job.wait(self.deadline.cap(QUICK + 5))
        took = time.monotonic() - started
        if code is None:
            self.fail("%s: still running %.0f s after it started, not a quick exit 2" % (what, took))
        lines = [l for l in job.errors.splitlines() if l.strip()]
        if code != 2 or len(lines) != 1:
            self.fail("%s: exited %s with %d stderr lines, not 2 with one line" % (what, code, len(lines)))
        text = lines[0].lower()
        missing = [w for w in words if w.lower() not in text]
        if missing or (names and not any(n.lower() in text for n in names)):
            self.fail("%s: the line %r does not mention %s" % (what, lines[0], missing or names))
        if "worker ran" in job.output:
            self.fail("%s: a worker was started" % what)
        print("%s: exit 2 after %.2f s: %s" % (what, took, lines[0]))
        return took

    def cleanup(self):
        for job in self.jobs:
            job.kill()
        shutil.rmtree(self.work, ignore_errors=True)


def torch_client_daemon(s):
    port = s.daemon(write_token(s.work))
    return s.check_probe(s.torch_probe(port, "ddprun-rendezvous"), "ddprun-rendezvous")


def torch_client_agent(s):
    job = TwoNodeJob(s.args.ddprun, s.args.python, s.deadline, "token-agent-%d" % os.getpid(),
                     token_file=write_token(s.work), token_by_env=True, steps=180)
    s.jobs.extend(job.agents)
    job.wait_training(1)
    stores = [(job.rdzv_port, "rendezvous store"), (job.worker_store_port(), "workers' store")]
    # Side by side: torch 2.x retries until its timeout, and the job must outlast both.
    probes = [(s.torch_probe(port, what), what) for port, what in stores]
    lines = [s.check_probe(probe, what) for probe, what in probes]
    if job.ranks_at(r"rank (?P<rank>\d+): trained .*"):
        s.fail("the job finished before the probes did: make it longer (steady_worker.py steps)")
    job.check_unaffected("the job probed by torch's clients")
    return "refused on both stores (%s); the job trained to its end" % "; ".join(lines)


def ddp_daemon(s, tls=False):
    secret = "ddprun-test-" + os.urandom(12).hex()
    certificate, key = write_certificate(s.work) if tls else (None, None)
    daemon_tls = ["--tls-cert", certificate, "--tls-key", key] if tls else []
    port = s.daemon(write_token(s.work, "daemon-token", secret=secret, newline=True), daemon_tls)
    agents_token = write_token(s.work, "agent-token", secret=secret, newline=False)
    job = TwoNodeJob(s.args.ddprun, s.args.python, s.deadline, "token-ddp-%d" % os.getpid(),
                     token_file=agents_token, token_by_env=True, daemon_port=port, nproc=2,
                     script=[EXAMPLE, "--epochs", "3"],
                     conf=["tls_cert=" + certificate, "tls_key=" + key] if tls else [])
    s.jobs.extend(job.agents)
    job.also = [j for j in s.jobs if j not in job.agents]
    return ddp_verdict(job, "DDP training through the token-protected daemon" + (" with TLS" if tls else ""))


def ddp_tls_agent(s):
    certificate, key = write_certificate(s.work)
    job = TwoNodeJob(s.args.ddprun, s.args.python, s.deadline, "tls-ddp-%d" % os.getpid(),
                     token_file=write_token(s.work), token_by_env=True, nproc=2,
                     script=[EXAMPLE, "--epochs", "3"],
                     conf=["tls_cert=" + certificate, "tls_key=" + key])
    s.jobs.extend(job.agents)
    # What listens on the endpoint now speaks TLS 1.3 with the job's certificate.
    context = ssl.create_default_context(cafile=certificate)
    context.check_hostname = False  # ddprun checks the signature, not the name (docs/security.md)
    try:
        with socket.create_connection(("127.0.0.1", job.rdzv_port), timeout=10) as raw:
            with context.wrap_socket(raw) as tls:
                version = tls.version()
    except (OSError, ssl.SSLError) as error:
        job.give_up("no TLS handshake with agent 0's rendezvous store: %s" % error)
    return ddp_verdict(job, "DDP training with TLS on the stores the agents host") + ", " + version


def relay_handoff(s):
    """One agent with a token and two Python workers (handoff_worker.py): each store connection
    lands on the store itself, past the relay, and torch's client works on it; a worker that drops
    DDPRUN_RELAY_HANDOFF lands on the relay and works too."""
    argv = [s.args.ddprun, "--standalone", "--nproc-per-node", "2",
            "--rdzv-conf", "token_file=" + write_token(s.work), HANDOFF]
    job = s.track(Job(argv, name="handoff job", env=dict(os.environ, PYTHON_EXEC=s.args.python)))
    if job.wait(s.deadline.cap(90)) is None:
        s.fail("the handoff job did not finish within 90 s")
    pattern = (r"rank (\d): handoff peer (\d+) store (\w+); without peer (\d+) store (\w+); "
               r"relay port (\d+)")
    ranks = {m.group(1): m for m in re.finditer(pattern, job.output)}
    if job.returncode != 0 or sorted(ranks) != ["0", "1"]:
        s.fail("the handoff job exited %s with lines for ranks %s" % (job.returncode, sorted(ranks)))
    for rank, m in sorted(ranks.items()):
        handed, handed_store, relayed, relayed_store, relay = (m.group(2), m.group(3), m.group(4),
                                                               m.group(5), m.group(6))
        if handed == relay or handed_store != "OK":
            s.fail("rank %s: with the handoff its connection landed on port %s (the relay's: %s), "
                   "store %s" % (rank, handed, relay, handed_store))
        if relayed != relay or relayed_store != "OK":
            s.fail("rank %s: without the handoff its connection landed on port %s, not the relay's "
                   "%s, store %s" % (rank, relayed, relay, relayed_store))
    first = ranks["0"]
    return "handed off to the store's port %s, past the relay's %s; without it, the relay" % (
        first.group(2), first.group(6))


def ddp_verdict(job, what):
    """Waits for `job` (examples/train_ddp.py) and checks that it trained on every rank."""
    job.finish(what)
    codes = [a.returncode for a in job.agents]
    ok = job.lines(r"OK: loss ([0-9.]+) -> ([0-9.]+); all (\d+) ranks hold identical parameters (\w+)")
    if codes != [0, 0] or not ok or int(ok[0].group(3)) != job.world:
        job.give_up("%s: exits %s, rank 0's verdict %s" %
                    (what, codes, ok[0].group(0) if ok else "missing"))
    return "loss %s -> %s on %d ranks, identical parameters %s" % (
        ok[0].group(1), ok[0].group(2), job.world, ok[0].group(4))


def wrong_token(s):
    port = s.daemon(write_token(s.work, "daemon-token"))
    agent = s.agent(write_token(s.work, "other-token"), port)
    took = s.refused_quickly(agent, ["token", "refused"], "an agent with the wrong token")
    return "exit 2 after %.2f s" % took


def missing_token(s):
    port = s.daemon(write_token(s.work, "daemon-token"))
    took = s.refused_quickly(s.agent(None, port), ["token"], "an agent without a token")
    return "exit 2 after %.2f s" % took


def file_mode(s):
    results = []
    for mode in (0o644, 0o640):
        path = write_token(s.work, "token-%o" % mode, mode=mode)
        daemon = s.track(Job([s.args.rendezvous, "--port", "0", "--token-file", path], name="daemon"))
        results.append(s.refused_quickly(daemon, ["chmod 600"], "the daemon with a mode %o token file" % mode))
        agent = s.agent(path, free_port(), nnodes="1")
        results.append(s.refused_quickly(agent, ["chmod 600"], "an agent with a mode %o token file" % mode))
    return "daemon and agent exit 2 for modes 644 and 640 (at most %.2f s)" % max(results)


def missing_file(s):
    path = os.path.join(s.work, "no-such-token")
    daemon = s.track(Job([s.args.rendezvous, "--port", "0", "--token-file", path], name="daemon"))
    # Naming the file: an option the daemon does not know at all is also exit 2 with one line.
    s.refused_quickly(daemon, [], "the daemon with a missing token file", names=[path])
    s.refused_quickly(s.agent(path, free_port(), nnodes="1"), [], "an agent with a missing token file",
                      names=[path])
    return "daemon and agent exit 2 naming the file"


def short_token(s):
    path = write_token(s.work, "short-token", secret="x" * 15)  # 16 bytes with the newline
    daemon = s.track(Job([s.args.rendezvous, "--port", "0", "--token-file", path], name="daemon"))
    s.refused_quickly(daemon, [], "the daemon with a 15-byte secret", names=[path, "16"])
    s.refused_quickly(s.agent(path, free_port(), nnodes="1"), [], "an agent with a 15-byte secret",
                      names=[path, "16"])
    return "daemon and agent exit 2 (15 bytes and a newline is not 16)"


def other_owner(s):
    """A mode-600 token file owned by another user of the node (local_user.py's), who can read
    and change the secret: refused by the daemon and the agent, one line naming the owner and
    `chown`. The old reader took it (mode 600 was all it checked)."""
    from local_user import other_user
    user = other_user()
    os.chmod(s.work, 0o711)  # the other user may pass through to its file, as anywhere it owns one
    path = write_token(s.work, "their-token")
    os.chown(path, user.uid, user.gid)
    shown = user.run(["cat", path], timeout=10, capture_output=True, text=True)
    if shown.returncode != 0 or not shown.stdout.strip():
        s.fail("%s cannot read its own token file: the case tests nothing" % user.name)
    words = ["belongs to uid %d" % user.uid, "chown"]
    daemon = s.track(Job([s.args.rendezvous, "--port", "0", "--token-file", path], name="daemon"))
    took = [s.refused_quickly(daemon, words, "the daemon with %s's token file" % user.name, names=[path])]
    took.append(s.refused_quickly(s.agent(path, free_port(), nnodes="1"), words,
                                  "an agent with %s's token file" % user.name, names=[path]))
    return "daemon and agent exit 2 for a mode-600 token file of %s (at most %.2f s)" % (user.name, max(took))


# A FIFO is refused by the open itself, not after a wait: an open that waited for a writer would
# never return. The bound only tells "refused" from "blocked", generously enough for an ASan
# build started beside other work (an ASan agent takes over a second to start on a loaded machine).
FIFO_LIMIT = 10.0


def token_fifo(s):
    """A FIFO at the token path: the old reader's open() waited for a writer forever."""
    path = os.path.join(s.work, "token")
    os.mkfifo(path, 0o600)
    daemon = s.track(Job([s.args.rendezvous, "--port", "0", "--token-file", path], name="daemon"))
    took = [s.refused_quickly(daemon, ["FIFO", "regular file"], "the daemon with a FIFO token", names=[path])]
    took.append(s.refused_quickly(s.agent(path, free_port(), nnodes="1"), ["FIFO", "regular file"],
                                  "an agent with a FIFO token", names=[path]))
    if max(took) > FIFO_LIMIT:
        s.fail("a FIFO token file took %.2f s to refuse, not within %.0f s" % (max(took), FIFO_LIMIT))
    return "daemon and agent exit 2 within %.2f s" % max(took)


def tls_untrusted(s):
    daemon_certificate, daemon_key = write_certificate(s.work, "daemon")
    certificate, key = write_certificate(s.work, "agent")
    token = write_token(s.work)
    port = s.daemon(token, ["--tls-cert", daemon_certificate, "--tls-key", daemon_key])
    agent = s.agent(token, port, conf=["tls_cert=" + certificate, "tls_key=" + key])
    took = s.refused_quickly(agent, ["not one the job trusts", "tls_ca"],
                             "an agent that does not trust the daemon's certificate")
    return "exit 2 after %.2f s" % took


def tls_needs_token(s):
    certificate, key = write_certificate(s.work)
    agent = s.agent(None, free_port(), nnodes="1", conf=["tls_cert=" + certificate, "tls_key=" + key])
    took = s.refused_quickly(agent, ["token_file"], "an agent with TLS files and no token")
    return "exit 2 after %.2f s" % took


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ddprun", required=True)
    parser.add_argument("--rendezvous", required=True, help="the ddprun-rendezvous binary")
    parser.add_argument("--python", default="/usr/bin/python3")
    parser.add_argument("--scenario", required=True, choices=TORCH_SCENARIOS + PLAIN_SCENARIOS)
    # Half of CTest's TIMEOUT: a hang is reported with what was seen, not killed without a word.
    parser.add_argument("--timeout", type=float, default=150)
    args = parser.parse_args()
    deadline = Deadline(args.timeout)

    version = "no torch needed"
    if args.scenario in TORCH_SCENARIOS:
        found = torch_version(args.python, deadline.cap(90))
        if found is None:
            return SKIP
        version = "torch " + found

    scenario = Scenario(args, deadline)
    handler = {"torch-client-daemon": torch_client_daemon, "torch-client-agent": torch_client_agent,
               "ddp-daemon": ddp_daemon, "wrong-token": wrong_token, "missing-token": missing_token,
               "file-mode": file_mode, "missing-file": missing_file, "short-token": short_token,
               "ddp-tls-agent": ddp_tls_agent, "ddp-tls-daemon": lambda s: ddp_daemon(s, tls=True),
               "tls-untrusted": tls_untrusted, "tls-needs-token": tls_needs_token,
               "relay-handoff": relay_handoff}
    started = time.monotonic()
    try:
        verdict = handler[args.scenario](scenario)
    finally:
        scenario.cleanup()
    print("RESULT %s (%s): %s (%.1f s)" % (args.scenario, version, verdict, time.monotonic() - started))
    return 0


if __name__ == "__main__":
    sys.exit(main())
