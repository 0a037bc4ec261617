#!/usr/bin/env python3
"""Attacks on a running ddprun job by anyone who can reach its store's port, with no credential
(attack_client.py: a bare TCPStore client), one scenario each:

  read-keys       LIST_KEYS/GET: every node's address, host name and agent pid; the workers'
                  store's gloo addresses
  stop-done       one COMPARE_SET of round/<r>/stop to {"kind":"done"}: the job "succeeds" at once
  forged-failure  a forged failure stop per round spends the restart budget, then fails the job
                  with the attacker's exit code
  reform-forever  a node_joined stop per round re-forms the job without spending any budget
  fake-node       a fake node at address 0.0.0.0 takes group rank 0 and points the round's master
                  at the attacker's own listener
  nproc-zero      a node record rewritten with nproc 0, then a re-form: the agents exit 1
  hold-lockout    a HOLD of /ddprun/active_run on a ddprun-rendezvous daemon locks jobs out

    attacks_test.py --ddprun BIN --rendezvous BIN --scenario NAME [--no-token] [--python PY]

Default (token mode): the job runs with a job secret (--rdzv-conf token_file=..., mode 600; the
daemon with --token-file) and the attacker has none. Passes when the attacker's connection is
closed with zero reply bytes on the rendezvous port and on the workers' store port, and the job
trains to its end in its first round (exit 0, no restart, no re-form).

--no-token: the same job with no secret; passes when the attack WORKS (what any store without
authentication allows): the proof that each attack is real, so that the token mode's passing
means the token stopped it.

PY runs the workers (tests/security/workers/steady_worker.py): /usr/bin/python3 (torch 1.13) by
default; exit 77 (skipped) when it has no torch.
"""
import argparse
import json
import os
import shutil
import socket
import struct
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from attack_client import AttackClient, StoreClosed, StoreTimeout, probe  # noqa: E402
from secjobs import (ACTIVE_RUN, SKIP, Deadline, TwoNodeJob, give_up, key,  # noqa: E402
                     start_daemon, torch_version, wait_until, write_token)

SCENARIOS = ["read-keys", "stop-done", "forged-failure", "reform-forever", "fake-node",
             "nproc-zero", "hold-lockout"]
# What a forged failure makes the job exit with: nothing a real worker here exits with.
FORGED_EXIT = 42
# Forged re-forms in reform-forever: enough to show it can go on (each costs one worker start).
REFORMS = 3


class Attack:
    """One scenario's run: the job, the attacker, and the mode's verdicts."""

    def __init__(self, args):
        self.args = args
        self.deadline = Deadline(args.timeout)
        self.work = tempfile.mkdtemp(prefix="ddprun-attack-")
        self.token = None if args.no_token else write_token(self.work)
        self.run_id = "sec-%s-%d" % (args.scenario, os.getpid())
        self.jobs = []  # to describe on giving up

    def job(self, **kwargs):
        job = TwoNodeJob(self.args.ddprun, self.args.python, self.deadline, self.run_id,
                         token_file=self.token, **kwargs)
        job.also = [j for j in self.jobs if j not in job.agents]
        self.jobs = job.jobs
        return job

    def fail(self, why):
        give_up(why, self.jobs)

    def attack(self, port, what, steps):
        """Runs `steps(store)` on a bare client's connection to `port`. Token mode: the store must
        close that connection without one reply byte (returns None); no-token mode: the attack
        must go through (returns what `steps` returns)."""
        try:
            with AttackClient("127.0.0.1", port, timeout=5) as store:
                if self.token:  # the PING was answered: no need to do the damage to know
                    self.fail("%s: the store answered a client without the token (its PING, %d "
                              "reply bytes): the job runs open" % (what, store.received))
                result = steps(store)
        except StoreClosed as closed:
            if self.token and closed.received == 0:
                print("%s: the attacker's connection was closed without reply" % what)
                return None
            self.fail("%s: the attack failed where it should %s: %s" %
                      (what, "be refused without reply" if self.token else "work", closed))
        except StoreTimeout as silent:
            self.fail("%s: the store neither answered nor closed the attacker's connection: %s" %
                      (what, silent))
        except OSError as error:  # no listener, say
            self.fail("%s: the attacker cannot reach port %d: %s" % (what, port, error))
        return result

    def refused(self, port, what):
        """Token mode: a bare client's opening on `port` is closed with zero reply bytes."""
        data, ended = probe("127.0.0.1", port, timeout=5)
        if ended != "closed" or data:
            self.fail("%s (port %d): a client without the token got %s after %d reply bytes %r, "
                      "not a close without reply" % (what, port, ended, len(data), data[:16]))
        print("%s (port %d): a client without the token is closed without reply" % (what, port))


def exit_times(agents, since, seconds):
    """Seconds from `since` to each agent's exit, polled every 5 ms for up to `seconds`; None for
    one still running then."""
    times = [None] * len(agents)
    end = time.monotonic() + seconds
    while None in times and time.monotonic() < end:
        for i, agent in enumerate(agents):
            if times[i] is None and agent.returncode is not None:
                times[i] = time.monotonic() - since
        time.sleep(0.005)
    return times


def wait_key(store, name, seconds):
    store.wait([name], seconds)
    return store.get(name).decode()


def current_round(store, run_id):
    return int(store.get(key(run_id, "current_round")) or b"0")


def gloo_address(blob):
    """A gloo address blob starts with a sockaddr (family 2 = IPv4: port big-endian, address)."""
    if len(blob) >= 8 and blob[:2] == b"\x02\x00":
        return "%s:%d" % (socket.inet_ntoa(blob[4:8]), struct.unpack(">H", blob[2:4])[0])
    return None


def read_keys(a):
    job = a.job()
    job.wait_training(1)

    def steal(store):
        keys = store.list_keys()
        mine = [k for k in keys if k.startswith(key(a.run_id, "node/").encode())]
        records = [json.loads(v) for v in store.multi_get(mine)]
        return keys, records, store.get(key(a.run_id, "round/0/master")).decode()

    stolen = a.attack(job.rdzv_port, "rendezvous store", steal)
    worker_port = job.worker_store_port()
    if a.token:
        a.refused(worker_port, "workers' store")
        # Not asserted, only shown: the relays serve workers that hold no token, so whoever can
        # reach 127.0.0.1 on this host may reach the workers' store through them.
        relays = []
        for relay in job.relay_ports():
            data, ended = probe("127.0.0.1", relay, timeout=2)
            relays.append("relay %d: %s after %d reply bytes" % (relay, ended, len(data)))
        print("a client without the token on the workers' relays: %s" % ("; ".join(relays) or "none"))
        job.check_unaffected("token mode")
        return "the attacker was refused on both stores; the job trained to its end"
    keys, records, master = stolen
    pids = sorted(r["pid"] for r in records)
    if pids != sorted(agent.pid for agent in job.agents):
        a.fail("the node records' pids %s are not the agents' %s" % (pids, [j.pid for j in job.agents]))
    if master != "127.0.0.1:%d" % worker_port:
        a.fail("the round's master record %r does not name the workers' store (port %d)" % (master, worker_port))

    def gloo(store):
        names = store.list_keys()
        return {n: gloo_address(v) for n, v in zip(names, store.multi_get(names))}

    addresses = {n: v for n, v in a.attack(worker_port, "workers' store", gloo).items() if v}
    if len(addresses) < job.world:
        a.fail("the workers' store gave %d gloo addresses for %d ranks" % (len(addresses), job.world))
    job.finish("the job after the read")
    nodes = "; ".join("node %d %s host %s pid %d" % (r["id"], r["address"], r["hostname"], r["pid"])
                      for r in records)
    return ("LIST_KEYS on the rendezvous store gave %d keys: %s; round 0's master %s; the workers' "
            "store gave %d gloo addresses: %s" %
            (len(keys), nodes, master, len(addresses),
             ", ".join("%s=%s" % (n.decode(), v) for n, v in sorted(addresses.items()))))


def stop_done(a):
    job = a.job()
    job.wait_training(1)
    done = json.dumps({"kind": "done"})
    started = []

    def stop(store):
        held = store.compare_set(key(a.run_id, "round/0/stop"), "", done)
        started.append(time.monotonic())
        return held.decode()

    held = a.attack(job.rdzv_port, "rendezvous store", stop)
    if a.token:
        a.refused(job.worker_store_port(), "workers' store")
        job.check_unaffected("token mode")
        return "the attacker was refused; the job trained to its end"
    if held != done:
        a.fail("the round's stop was already %r" % held)
    times = exit_times(job.agents, started[0], a.deadline.cap(20))
    codes = [agent.returncode for agent in job.agents]
    if None in times or codes != [0, 0]:
        a.fail("after the forged done the agents exited %s at %s s" % (codes, times))
    finished = job.ranks_at(r"rank (?P<rank>\d+): trained .*")
    if finished:
        a.fail("ranks %s finished training: the forged done did not cut the job short" % sorted(finished))
    steps = len(job.lines(r"rank 0 step \d+"))
    return ("both agents exited 0, %.3f s and %.3f s after the compare-and-set; the workers were "
            "killed after %d of %d steps" % (times[0], times[1], steps, job.steps))


def forged_failure_record(round_number):
    failure = {"rank": 0, "localRank": 0, "groupRank": 0, "host": "forged-host", "pid": 1,
               "exitCode": FORGED_EXIT, "signal": 0, "observedAt": time.time(),
               "message": "forged by a client without credentials (round %d)" % round_number,
               # Claimed progress: the same failure again is then no user's error to stop at,
               # and each forged stop spends a restart.
               "progress": True}
    return json.dumps({"kind": "failure", "node": 1, "group_rank": 0, "host": "forged-host",
                       "failure": failure})


def wait_round_training(job, round_number):
    """Until round `round_number`'s workers train: every rank has done step 1 that many times
    more (each round starts its workers afresh)."""
    need = (round_number + 1) * job.world
    wait_until(lambda: len(job.lines(r"rank \d+ step 1")) >= need,
               job.deadline, 60, "round %d's workers did not train" % round_number, job.jobs)


def forged_failure(a):
    restarts = 2
    job = a.job(options=["--max-restarts", str(restarts)])
    job.wait_training(1)
    forged = []

    def fail_rounds(store):
        for _ in range(restarts + 1):
            r = current_round(store, a.run_id)
            wait_key(store, key(a.run_id, "round/%d/closed" % r), 30)
            wait_round_training(job, r)
            store.compare_set(key(a.run_id, "round/%d/stop" % r), "", forged_failure_record(r))
            forged.append(time.monotonic())
            if len(forged) <= restarts:  # the next round, once the agents have re-formed
                store.wait([key(a.run_id, "round/%d/closed" % (r + 1))], 60)
        return True

    if a.attack(job.rdzv_port, "rendezvous store", fail_rounds) is None:
        a.refused(job.worker_store_port(), "workers' store")
        job.check_unaffected("token mode")
        return "the attacker was refused; the job trained to its end"
    times = exit_times(job.agents, forged[-1], a.deadline.cap(30))
    codes = [agent.returncode for agent in job.agents]
    if codes != [FORGED_EXIT] * 2:
        a.fail("after %d forged failures the agents exited %s, not %d" % (len(forged), codes, FORGED_EXIT))
    for n in range(1, restarts + 1):
        if "restarting the job (restart %d of %d) after rank 0 on forged-host" % (n, restarts) not in job.errors:
            a.fail("the agents did not restart for forged failure %d" % n)
    if "forged by a client without credentials" not in job.errors:
        a.fail("the failure summary does not quote the forged message")
    return ("%d forged failure stops spent the whole restart budget (--max-restarts %d): both agents "
            "exited %d (the attacker's code), %.2f s / %.2f s after the last; the summary blames "
            "rank 0 on forged-host" % (len(forged), restarts, FORGED_EXIT, times[0], times[1]))


def reform_forever(a):
    job = a.job(options=["--max-restarts", "0"])
    job.wait_training(1)
    seen = {}

    def reform(store):
        for _ in range(REFORMS):
            r = current_round(store, a.run_id)
            wait_round_training(job, r)
            joined = json.dumps({"kind": "node_joined", "node": 99, "host": "forged-host"})
            store.compare_set(key(a.run_id, "round/%d/stop" % r), "", joined)
            closed = wait_key(store, key(a.run_id, "round/%d/closed" % (r + 1)), 60)
            seen[r + 1] = json.loads(closed)
        return True

    if a.attack(job.rdzv_port, "rendezvous store", reform) is None:
        a.refused(job.worker_store_port(), "workers' store")
        job.check_unaffected("token mode")
        return "the attacker was refused; the job trained to its end"
    job.finish("the job after the forged re-forms")
    codes = [agent.returncode for agent in job.agents]
    restarts = sorted({record["restarts"] for record in seen.values()})
    # The agents' "re-forming" notice is an info line, not shown by default: count worker starts.
    starts = len(job.lines(r"rank \d+ env: .*"))
    if codes != [0, 0] or restarts != [0] or starts != (REFORMS + 1) * job.world:
        a.fail("after %d forged node_joined stops: exits %s, restart counts %s, %d worker starts" %
               (REFORMS, codes, restarts, starts))
    return ("%d forged node_joined stops re-formed the job %d times (rounds 1..%d closed with "
            "restarts %s under --max-restarts 0); %d worker starts for %d ranks; it only finished "
            "(exit 0) because the attacker stopped" % (REFORMS, REFORMS, REFORMS, restarts, starts, job.world))


def fake_node(a):
    # Room for a third node (2:3), so a joiner is let in; last call short so round 0 closes soon.
    job = a.job(nnodes="2:3", conf=["last_call_timeout=1"])
    job.wait_training(1)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))  # the attacker's "store": workers connecting to 0.0.0.0 land here
    listener.listen(16)
    fake_port = listener.getsockname()[1]
    hijack = {}

    def take_rank_zero(store):
        r = current_round(store, a.run_id)
        node = store.add(key(a.run_id, "next_node_id"), 1)
        record = json.dumps({"id": node, "address": "0.0.0.0", "hostname": "attacker", "nproc": 1,
                             "pid": 1, "static_rank": -1})
        store.set(key(a.run_id, "node/%d" % node), record)
        store.hold(key(a.run_id, "alive/%d" % node), record)  # alive while this connection lasts
        slot = store.add(key(a.run_id, "round/%d/joined" % (r + 1)), 1)
        store.set(key(a.run_id, "round/%d/member/%d" % (r + 1, slot)), str(node))
        store.compare_set(key(a.run_id, "round/%d/stop" % r), "",
                          json.dumps({"kind": "node_joined", "node": node, "host": "attacker"}))
        closed = json.loads(wait_key(store, key(a.run_id, "round/%d/closed" % (r + 1)), 60))
        hijack["closed"] = closed
        # A member of the round: the close record names it, or (with seats) the closer wrote it one.
        hijack["member"] = node in closed.get("members", []) or (
            "closer" in closed and
            store.check([key(a.run_id, "round/%d/seat/%d/%d" % (r + 1, closed["closer"], node))]))
        store.set(key(a.run_id, "round/%d/master" % (r + 1)), "0.0.0.0:%d" % fake_port)
        since = time.monotonic()
        hijack["node"], hijack["round"] = node, r + 1
        hijack["connections"] = []
        # Each connection stays open until every worker has come: one hung up on at once fails
        # its worker, and the job's teardown could then stop the others before they connect.
        held = []
        listener.settimeout(1)
        try:
            while len(hijack["connections"]) < job.world and \
                    time.monotonic() - since < a.deadline.cap(60):
                try:
                    conn, _ = listener.accept()
                except socket.timeout:
                    continue
                held.append(conn)
                conn.settimeout(5)
                try:
                    first = conn.recv(64)
                except OSError:
                    first = b""
                hijack["connections"].append((time.monotonic() - since, first))
        finally:
            for conn in held:
                conn.close()
        return True

    try:
        if a.attack(job.rdzv_port, "rendezvous store", take_rank_zero) is None:
            a.refused(job.worker_store_port(), "workers' store")
            job.check_unaffected("token mode")
            return "the attacker was refused; the job trained to its end"
    finally:
        listener.close()
    connections = hijack["connections"]

    def hijacked_ranks():
        return sorted((r, e.get("GROUP_RANK")) for r, e in job.worker_envs()
                      if e.get("MASTER_ADDR") == "0.0.0.0" and e.get("MASTER_PORT") == str(fake_port))

    # Their env lines may trail their connections through the agents' output pipes.
    end = time.monotonic() + a.deadline.cap(10)
    while len(hijacked_ranks()) < job.world and time.monotonic() < end:
        time.sleep(0.05)
    hijacked = hijacked_ranks()
    if not hijack["member"] or len(connections) < job.world or \
            len(hijacked) < job.world:
        a.fail("the fake node did not take over: round record %s, %d connections to the attacker's "
               "listener, workers' env %s" % (hijack["closed"], len(connections), job.worker_envs()))
    # Hijacked: its workers wait for a rank 0 that does not exist (or fail when the attacker's
    # "store" hangs up on them).
    job.kill()
    return ("node %d at 0.0.0.0 joined round %d (close record %s) as group rank 0; the real agents' "
            "workers (rank, group rank) %s got MASTER_ADDR=0.0.0.0 MASTER_PORT=%d and %d of them "
            "connected to the attacker's listener (first %.2f s after it wrote the master, first "
            "bytes %s)" %
            (hijack["node"], hijack["round"], hijack["closed"], hijacked, fake_port,
             len(connections), connections[0][0], connections[0][1][:16].hex()))


def nproc_zero(a):
    job = a.job()
    job.wait_training(1)
    started = []

    def corrupt(store):
        name = key(a.run_id, "node/1")
        record = json.loads(store.get(name))
        record["nproc"] = 0
        store.set(name, json.dumps(record))
        store.compare_set(key(a.run_id, "round/0/stop"), "",
                          json.dumps({"kind": "node_joined", "node": 99, "host": "forged-host"}))
        started.append(time.monotonic())
        return True

    if a.attack(job.rdzv_port, "rendezvous store", corrupt) is None:
        a.refused(job.worker_store_port(), "workers' store")
        job.check_unaffected("token mode")
        return "the attacker was refused; the job trained to its end"
    times = exit_times(job.agents, started[0], a.deadline.cap(30))
    codes = [agent.returncode for agent in job.agents]
    lines = [l for l in job.errors.splitlines() if "malformed" in l]
    if codes != [1, 1] or len(lines) < 2:
        a.fail("after the nproc 0 record the agents exited %s with %d 'malformed' lines" % (codes, len(lines)))
    if job.ranks_at(r"rank (?P<rank>\d+): trained .*"):
        a.fail("a rank finished training despite the attack")
    return ("both agents exited 1 (%.2f s / %.2f s after the forged re-form), the job killed "
            "mid-training: %s" % (times[0], times[1], lines[0].split("] ", 3)[-1][:200]))


def hold_lockout(a):
    daemon, port = start_daemon(a.args.rendezvous, a.deadline, token_file=a.token)
    a.jobs.append(daemon)
    # The lock lasts as long as the attacker's connection: keep it open through the job.
    client = None
    try:
        try:
            client = AttackClient("127.0.0.1", port, timeout=5)
            held = client.hold(ACTIVE_RUN, "attacker-run").decode()
        except StoreClosed as closed:
            if a.token and closed.received == 0:
                held = None
                print("ddprun-rendezvous: the attacker's connection was closed without reply")
            else:
                a.fail("the HOLD failed: %s" % closed)
        except StoreTimeout as silent:
            a.fail("the daemon neither answered nor closed the attacker's connection: %s" % silent)
        if a.token and held is not None:
            a.fail("the token-protected daemon granted a HOLD to a client without the token (%r)" % held)
        if not a.token and held != "attacker-run":
            a.fail("the HOLD of %s was not granted (%r)" % (ACTIVE_RUN, held))
        started = time.monotonic()
        job = a.job(daemon_port=port)
        if a.token:
            job.wait_training(1)
            a.refused(port, "ddprun-rendezvous")
            a.refused(job.worker_store_port(), "workers' store")
            job.check_unaffected("token mode")
            return "the attacker was refused; the job trained to its end"
        job.finish("the locked-out job")
        took = time.monotonic() - started
        codes = [agent.returncode for agent in job.agents]
        refusals = [l for l in job.errors.splitlines() if "belongs to run 'attacker-run'" in l]
        if 0 in codes or len(refusals) < 2 or "env:" in job.output:
            a.fail("the locked-out agents exited %s with %d refusals" % (codes, len(refusals)))
        return ("with %s held by the attacker, both agents of a new job exited %s within %.2f s, "
                "no worker started: %s" % (ACTIVE_RUN, codes, took, refusals[0].split("] ", 3)[-1][:160]))
    finally:
        if client:
            client.close()
        daemon.kill()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ddprun", required=True)
    parser.add_argument("--rendezvous", required=True, help="the ddprun-rendezvous binary")
    parser.add_argument("--python", default="/usr/bin/python3", help="runs the workers (torch)")
    parser.add_argument("--scenario", required=True, choices=SCENARIOS)
    parser.add_argument("--no-token", action="store_true",
                        help="no job secret: the attack must work (the proof that it is real)")
    # Half of CTest's TIMEOUT: a hang is reported with what was seen, not killed without a word.
    parser.add_argument("--timeout", type=float, default=150)
    args = parser.parse_args()

    deadline = Deadline(args.timeout)
    if torch_version(args.python, deadline.cap(60)) is None:
        return SKIP

    attack = Attack(args)
    attack.deadline = deadline
    scenario = {"read-keys": read_keys, "stop-done": stop_done, "forged-failure": forged_failure,
                "reform-forever": reform_forever, "fake-node": fake_node, "nproc-zero": nproc_zero,
                "hold-lockout": hold_lockout}[args.scenario]
    started = time.monotonic()
    try:
        verdict = scenario(attack)
    finally:
        for job in attack.jobs:
            job.kill()
        shutil.rmtree(attack.work, ignore_errors=True)
    mode = "no token (the attack works)" if args.no_token else "token"
    print("RESULT %s, %s: %s (%.1f s)" % (args.scenario, mode, verdict, time.monotonic() - started))
    return 0


if __name__ == "__main__":
    sys.exit(main())
