#!/usr/bin/env python3
"""Issue #18's attack on the workers' relay, by a real other user of the node (docs/security.md,
"On the node"): a job with a token and idle workers, and an unprivileged local user who fills the
relay's accept queue with idle connections while sending TCPStore SETs on other connections that
it closes at once. A connection closed while it waits in the queue leaves a TIME_WAIT or FIN_WAIT2
mini-socket, which the kernel's socket diagnostics report as uid 0, inode 0: a relay that trusted
that uid carried the SET to the workers' store under the job's token. Passes when no key the
attacker sent ever appears in the workers' store, and the flood is in the agent's log: the first
refusal of the attacker's uid at once, and, once the agent is stopped (the counting windows are a
minute long), how many of its connections were refused.

    relay_flood_test.py --ddprun BIN [--rendezvous BIN] [--bursts N] [--timeout S]

The agent runs as root (this driver's user, so root is the agent's own user and may read the store
through the relay); the attacker is tests/security/local_user.py's `ddprun-attacker`, run with
setpriv. No torch: the workers are `sh` that write their MASTER_PORT (the relay's port) to a file
and sleep. Exit 77 (skipped) where another user cannot be had (not root, no useradd/setpriv).
Every wait is bounded by one deadline; every process started here is killed on the way out.
"""
import argparse
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from attack_client import AttackClient, StoreClosed, StoreTimeout  # noqa: E402
from local_user import other_user  # noqa: E402
from secjobs import (Deadline, Job, free_port, give_up, listening_ports, wait_until,  # noqa: E402
                     write_token)

# The keys the attacker writes: KEY_PREFIX + "<burst>/<connection>", raw on the wire.
KEY_PREFIX = b"relay-flood/"
# Per burst, as in the issue: for HOLD seconds two processes keep up to FLOOD idle connections each
# open to the relay (together more than its accept queue, capped by net.core.somaxconn, 4096 by
# default), opening new ones as the relay refuses them, while a third sends a SET on each of WRITES
# other connections and closes it at once.
FLOOD = 3000
HOLD = 1.0
WRITES = 50
# After a burst, time for the relay to drain its queue (and carry whatever it admitted).
SETTLE = 2.0

# The attacker's program, written to a file the other user can read (it may not read this tree).
ATTACKER = r'''
import collections, errno, json, resource, select, socket, struct, sys, time

def blob(data):
    return struct.pack("<Q", len(data)) + data

def raise_fd_limit(wanted):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted, hard), hard))

def start_connect():
    s = socket.socket()
    s.setblocking(False)
    code = s.connect_ex(("127.0.0.1", port))
    if code not in (0, errno.EINPROGRESS):
        s.close()
        return None, code
    return s, 0

def flood(count, hold):
    # Non-blocking connects, never waited for (SYNs the full queue drops are retried by the
    # kernel), for the whole hold, so that the queue stays full: with `count` open, the oldest
    # (refused by now) are closed to make room, and so on running out of ports or descriptors.
    raise_fd_limit(count + 64)
    end = time.monotonic() + hold
    held, opened, errors = collections.deque(), 0, {}
    while time.monotonic() < end:
        if len(held) >= count:
            for _ in range(count // 10):
                held.popleft().close()
        s, code = start_connect()
        if s is None:
            name = errno.errorcode.get(code, str(code))
            errors[name] = errors.get(name, 0) + 1
            for _ in range(min(len(held), count // 10)):
                held.popleft().close()
            time.sleep(0.001)
            continue
        held.append(s)
        opened += 1
    for s in held:
        s.close()
    return {"opened": opened, "errors": errors}

def write(prefix, count, delay, spread):
    # VALIDATE (torch 2.x) then SET key value, then close at once: the bytes wait in the relay's
    # accepted-but-not-yet-served socket while this side of the connection is gone.
    raise_fd_limit(count + 64)
    time.sleep(delay)
    pending, sent, failed = {}, 0, 0
    for i in range(count):
        s, code = start_connect()
        if s is None:
            failed += 1
        else:
            payload = struct.pack("<BI", 0, 0x3C85F7CE) + bytes([1]) + \
                blob(prefix + str(i).encode()) + blob(b"written by another user")
            pending[s] = payload
        time.sleep(spread / count)
        sent += flush(pending, 0)
    end = time.monotonic() + 3
    while pending and time.monotonic() < end:
        sent += flush(pending, 0.05)
    for s in pending:
        s.close()
    return {"sent": sent, "failed": failed, "unconnected": len(pending)}

def flush(pending, timeout):
    if not pending:
        return 0
    _, writable, _ = select.select([], list(pending), [], timeout)
    done = 0
    for s in writable:
        payload = pending.pop(s)
        if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
            try:
                s.send(payload)
                done += 1
            except OSError:
                pass
        s.close()
    return done

role, port = sys.argv[1], int(sys.argv[2])
if role == "flood":
    result = flood(int(sys.argv[3]), float(sys.argv[4]))
else:
    result = write(sys.argv[3].encode(), int(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6]))
print(json.dumps(result), flush=True)
'''

# The workers: write the port they were given (the relay's, under a token), then sleep.
WORKER = 'echo "$MASTER_PORT" > "$0/port.$RANK.tmp" && mv "$0/port.$RANK.tmp" "$0/port.$RANK" ' \
         '&& exec sleep 600'


class Flood:
    def __init__(self, args):
        self.args = args
        self.deadline = Deadline(args.timeout)
        self.work = tempfile.mkdtemp(prefix="ddprun-relay-flood-")  # mode 700: the token is here
        self.attacker_dir = tempfile.mkdtemp(prefix="ddprun-relay-flood-attacker-")
        os.chmod(self.attacker_dir, 0o755)
        self.program = os.path.join(self.attacker_dir, "attacker.py")
        with open(self.program, "w") as out:
            out.write(ATTACKER)
        os.chmod(self.program, 0o644)
        self.jobs = []  # every process started, killed on the way out
        self.agent = None
        self.burst_jobs = []  # the attackers of the burst under way, shown on giving up

    def fail(self, why):
        give_up(why, [job for job in [self.agent] + self.burst_jobs if job])

    def start_agent(self):
        token = write_token(self.work)
        rdzv_port = free_port()
        argv = [self.args.ddprun, "--nnodes", "1", "--nproc-per-node", "2", "--rdzv-backend", "c10d",
                "--rdzv-endpoint", "127.0.0.1:%d" % rdzv_port, "--rdzv-id", "relay-flood-%d" % os.getpid(),
                "--rdzv-conf", "token_file=" + token, "--no-python", "/bin/sh", "-c", WORKER, self.work]
        self.agent = Job(argv, name="ddprun agent")
        self.jobs.append(self.agent)

        def given_ports():
            if self.agent.returncode is not None:
                self.fail("the agent exited %d before its workers started" % self.agent.returncode)
            ports = set()
            for rank in (0, 1):
                try:
                    with open(os.path.join(self.work, "port.%d" % rank)) as f:
                        ports.add(int(f.read().strip()))
                except (OSError, ValueError):
                    return None
            return ports
        ports = wait_until(given_ports, self.deadline, 60, "the workers did not report MASTER_PORT",
                           [self.agent])
        if len(ports) != 1:
            self.fail("the two workers of one agent were given different ports %s" % sorted(ports))
        relay = ports.pop()
        listening = listening_ports(self.agent.pid)
        if relay not in listening or relay == rdzv_port:
            self.fail("the workers' MASTER_PORT %d is not a relay of the agent (it listens on %s, "
                      "rendezvous %d)" % (relay, sorted(listening), rdzv_port))
        return relay

    def store_keys(self, relay):
        """The attacker's keys in the workers' store, read through the relay as root (the agent's
        own user, so served)."""
        try:
            with AttackClient("127.0.0.1", relay, timeout=10) as store:
                return sorted(k for k in store.list_keys() if k.startswith(KEY_PREFIX))
        except (StoreClosed, StoreTimeout, OSError) as error:
            self.fail("root, the agent's own user, cannot read the workers' store through the "
                      "relay on port %d: %s" % (relay, error))

    def attacker(self, user, argv, name):
        job = Job(user.command([sys.executable, self.program] + [str(a) for a in argv]), name=name)
        self.jobs.append(job)
        self.burst_jobs.append(job)
        return job

    def burst(self, user, relay, number):
        """One burst: two flooders and a writer at once; what each reported."""
        prefix = KEY_PREFIX + b"%d/" % number
        self.burst_jobs = []
        flooders = [self.attacker(user, ["flood", relay, FLOOD, HOLD], "flooder %d.%d" % (number, i))
                    for i in range(2)]
        # The writer starts once the queue is filling, and spreads its connections over the hold.
        writer = self.attacker(user, ["write", relay, prefix.decode(), WRITES, 0.15, HOLD * 0.7],
                               "writer %d" % number)
        reports = []
        for job in flooders + [writer]:
            if job.wait(self.deadline.cap(20)) is None:
                self.fail("burst %d: %s did not finish within 20 s" % (number, job.name))
            if job.returncode != 0:
                self.fail("burst %d: %s exited %d: %s" % (number, job.name, job.returncode,
                                                         job.errors.strip()[-2000:]))
            reports.append(json.loads(job.output.strip().splitlines()[-1]))
        return reports

    def run(self):
        user = other_user()
        relay = self.start_agent()
        print("agent %d: workers idle, relay on 127.0.0.1:%d; attacker: %s (uid %d)" %
              (self.agent.pid, relay, user.name, user.uid), flush=True)
        if self.store_keys(relay):
            self.fail("attacker keys in the store before any attack")
        landed = {}
        for number in range(1, self.args.bursts + 1):
            if self.deadline.left() < 30:
                self.fail("the deadline is near after %d bursts" % (number - 1))
            flood_a, flood_b, writer = self.burst(user, relay, number)
            time.sleep(SETTLE)
            if self.agent.returncode is not None:
                self.fail("the agent exited %d under the flood" % self.agent.returncode)
            keys = self.store_keys(relay)
            landed[number] = [k for k in keys if k.startswith(KEY_PREFIX + b"%d/" % number)]
            print("burst %d: %d + %d idle connections opened in %.1f s (errors %s %s); %d SET+close "
                  "sent (%d connects failed, %d never connected): %d landed in the workers' store" %
                  (number, flood_a["opened"], flood_b["opened"], HOLD, flood_a["errors"] or "none",
                   flood_b["errors"] or "none", writer["sent"], writer["failed"],
                   writer["unconnected"], len(landed[number])), flush=True)
        # Late arrivals too: a write still in the relay's queue at its burst's check.
        time.sleep(SETTLE)
        final = self.store_keys(relay)
        hit = sum(1 for n in landed if landed[n])
        if final:
            self.fail("the attack landed: %d of %d bursts put keys of user %s into the workers' "
                      "store through the relay (%d keys in all, e.g. %s)" %
                      (hit, len(landed), user.name, len(final), final[:5]))
        # The flood is in the log: the attacker's first refusal at once, and, when the agent stops
        # (the windows are a minute long), how many of its connections were refused.
        self.agent.signal(signal.SIGTERM)
        if self.agent.wait(self.deadline.cap(30)) is None:
            self.fail("the agent did not stop within 30 s of SIGTERM")
        relay_lines = [line for line in self.agent.errors.splitlines() if "relay" in line]
        print("the agent's relay log lines (%d):" % len(relay_lines))
        for line in relay_lines[:20]:
            print("  " + line)
        source = "from uid %d" % user.uid
        if not any("refused a connection " + source in line for line in relay_lines):
            self.fail("the agent's log has no line for the refusal of uid %d's connections" % user.uid)
        counted = [int(m.group(1).replace(",", "")) for line in relay_lines
                   for m in [re.search(r"refused ([\d,]+) connections? %s " % source, line)] if m]
        if not counted:
            self.fail("the agent's log has no count of uid %d's refused connections" % user.uid)
        return ("no key of %s reached the workers' store in %d bursts; the agent logged %d lines "
                "for it, counting %s refused connections" %
                (user.name, len(landed), len(relay_lines), "+".join(map(str, counted))))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ddprun", required=True)
    parser.add_argument("--rendezvous", help="unused (ddprun_security_test passes it to every driver)")
    parser.add_argument("--bursts", type=int, default=5)
    # Half of CTest's TIMEOUT: a hang is reported with what was seen, not killed without a word.
    parser.add_argument("--timeout", type=float, default=150)
    args = parser.parse_args()
    flood = Flood(args)
    started = time.monotonic()
    try:
        verdict = flood.run()
    finally:
        for job in flood.jobs:
            job.kill()
        shutil.rmtree(flood.work, ignore_errors=True)
        shutil.rmtree(flood.attacker_dir, ignore_errors=True)
    print("RESULT relay flood: %s (%.1f s)" % (verdict, time.monotonic() - started))
    return 0


if __name__ == "__main__":
    sys.exit(main())
