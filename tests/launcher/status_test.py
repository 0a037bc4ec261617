#!/usr/bin/env python3
"""`ddprun status` against a real 2-node job (issue #21, point 4): two agents on 127.0.0.1, two
workers each.

    status_test.py --ddprun BIN --scenario c10d|daemon|daemon-tls|etcd [--daemon BIN]

  c10d    the store hosted by the first agent (c10d): while the job runs, the text and --json
          (run id, round, restarts, both nodes, each worker's rank, local rank, state, its
          real pid, from the worker's own pid file, and its last heartbeat: --hang-timeout); a run id that does not exist (exit 3); a
          worker failure and the restart (restarts 1, the last failure's rank, reason and class);
          after the job ended the store went with its agent: nothing answers (exit 3, one line,
          within a few seconds)
  daemon  the same against ddprun-rendezvous with a token; without the token: exit 2, one line;
          after the job ended the daemon still holds the snapshots: "has ended", exit 4, and
          --json's state "ended" with the exit code
  daemon-tls  the same with the job's TLS files too (the daemon serves TLS); without them, exit 2
  etcd    the same on a one-member etcd on loopback (skipped, 77, without /usr/bin/etcd); the
          last agent out removes the run's keys from the shared etcd, so after the end: exit 3
  hostile-values  the c10d job while it runs, with what anyone who reaches its store (no token)
          writes under its status prefix with torch's own TCPStore: a 2 MiB value and a snapshot
          whose host name, address and run id hold ESC, BEL, CR, DEL, a newline, C1 CSI (U+009B)
          and bidi controls (U+202E ...). Both nodes still shown (exit 0, within 10 s), the large
          key named as too large, the forged node's texts escaped: no control or bidi character
          in the text nor in --json's bytes, and --json is valid JSON holding the values exactly.
          The job itself finishes (exit 0)
  first-second  `ddprun status` in a loop from the first agent's start until both nodes'
          snapshots show the workers running: from the moment the agent logs that it joined
          round 0, never exit 3 ("no job"), and before any snapshot it says what the round
          records say ("round 0 forming, 1 node joined, no status published yet"); bounded in
          count (400 calls) and time (60 s)

Workers wait for a "go" file of their restart before they exit (rank 3 fails the first time,
writing a torch-style error file), so what is checked while they run does not depend on the
machine's speed. Every wait is bounded and prints what it saw when it gives up.
"""
import argparse
import json
import os
import re
import secrets
import shutil
import socket
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from jobs import SKIP, Deadline, Job, give_up, run, wait_all  # noqa: E402
from ports import free_port  # noqa: E402

# argv[1]: the work directory. Writes pid.<restart>.<rank>, waits (60 s at most, reporting
# progress through its heartbeat file) for go.<restart>, then exits: rank 3 fails at restart 0 as torch's @record would report it.
WORKER = r'''
import json, os, sys, time
work = sys.argv[1]
rank, restart = os.environ["RANK"], os.environ["TORCHELASTIC_RESTART_COUNT"]
with open(os.path.join(work, "pid.%s.%s" % (restart, rank)), "w") as f:
    f.write(str(os.getpid()))
end = time.monotonic() + 60
while not os.path.exists(os.path.join(work, "go.%s" % restart)) and time.monotonic() < end:
    os.utime(os.environ["DDPRUN_HEARTBEAT_FILE"])  # progress, for --hang-timeout
    time.sleep(0.05)
if rank == "3" and restart == "0":
    with open(os.environ["TORCHELASTIC_ERROR_FILE"], "w") as f:
        json.dump({"message": {"message": "ValueError: boom at step 7",
                               "extraInfo": {"py_callstack": "Traceback ...", "timestamp": str(int(time.time()))}}}, f)
    sys.exit(3)
'''


class Check:
    def __init__(self, jobs):
        self.jobs = jobs

    def __call__(self, condition, what, seen=""):
        if not condition:
            give_up("%s\n--- seen ---\n%s" % (what, seen), self.jobs)


def status(ddprun, endpoint_args, *extra, timeout=20):
    return run([ddprun, "status", *endpoint_args, *extra], timeout, name="ddprun status")


def shown(job):
    return "exit %s\n--- stdout\n%s--- stderr\n%s" % (job.returncode, job.output, job.errors)


def pids_of(work, restart):
    pids = {}
    for rank in range(4):
        path = os.path.join(work, "pid.%d.%d" % (restart, rank))
        if os.path.exists(path):
            text = open(path).read().strip()
            if text:
                pids[rank] = int(text)
    return pids


def wait_for(condition, deadline, seconds, why, jobs):
    end = time.monotonic() + min(seconds, deadline.left())
    while time.monotonic() < end:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    give_up(why, jobs)


def poll_json(args, endpoint_args, deadline, want, why, jobs):
    """`ddprun status --json` until `want(value)` (at most 30 s), returning the value."""
    last = [None]

    def ask():
        done = status(args.ddprun, endpoint_args, "--json")
        last[0] = done
        if done.returncode != 0:
            return None
        value = json.loads(done.output)
        return value if want(value) else None
    end = time.monotonic() + min(30, deadline.left())
    while time.monotonic() < end:
        value = ask()
        if value:
            return value
        time.sleep(0.3)
    give_up("%s; the last status:\n%s" % (why, shown(last[0]) if last[0] else "none"), jobs)


def scenario(args, work, endpoint, backend, conf, servers):
    deadline = Deadline(150)
    run_id = "status-" + secrets.token_hex(4)
    script = os.path.join(work, "worker.py")
    with open(script, "w") as f:
        f.write(WORKER)
    job_args = ["--rdzv-backend", backend, "--rdzv-endpoint", endpoint, "--rdzv-id", run_id]
    if conf:
        job_args += ["--rdzv-conf", conf]
    env = dict(os.environ, LOGLEVEL="INFO")
    agents = [Job([args.ddprun, "--nnodes", "2", "--nproc-per-node", "2", "--max-restarts", "1",
                   "--hang-timeout", "60",
                   *job_args, script, work], name="agent %d" % n, env=env, cwd=work) for n in range(2)]
    jobs = agents + servers
    check = Check(jobs)
    try:
        # While the job runs: every worker shown running, with its real pid.
        wait_for(lambda: len(pids_of(work, 0)) == 4, deadline, 60, "the 4 workers did not start", jobs)
        pids = pids_of(work, 0)
        value = poll_json(args, job_args, deadline,
                          lambda v: sorted(w["pid"] for n in v["nodes"] for w in n["workers"]
                                           if w["state"] == "running" and "last_heartbeat" in w)
                          == sorted(pids.values()),
                          "status --json never showed the 4 running workers with pids %s and a "
                          "heartbeat" % pids, jobs)
        check(value["run_id"] == run_id and value["round"] == 0 and value["restarts"] == 0
              and value["max_restarts"] == 1 and value["state"] == "running", "run-level fields", value)
        check(sorted(n["group_rank"] for n in value["nodes"]) == [0, 1], "group ranks", value)
        for node in value["nodes"]:
            check(node["addr"] == "127.0.0.1" and node["state"] == "running", "node fields", node)
            for worker in node["workers"]:
                check(worker["rank"] == node["group_rank"] * 2 + worker["local_rank"]
                      and pids[worker["rank"]] == worker["pid"], "worker rank/local_rank/pid", node)
        text = status(args.ddprun, job_args)
        check(text.returncode == 0, "status (text) while the job runs: exit 0", shown(text))
        check(text.output.startswith("job '%s': round 0, restarts 0 of 1, 2 nodes\n" % run_id),
              "the text's first line", shown(text))
        for rank, pid in pids.items():
            line = "  rank %d (local %d): pid %d, running, started " % (rank, rank % 2, pid)
            check(line in text.output and "last heartbeat" in text.output.split(line)[1].split("\n")[0],
                  "rank %d's line in the text, with its last heartbeat" % rank, shown(text))
        # A run id that does not exist: exit 3, one line, at once.
        started = time.monotonic()
        other = status(args.ddprun, [a if a != run_id else "no-such-run" for a in job_args])
        check(other.returncode == 3 and other.output == "" and len(other.errors.splitlines()) == 1
              and "no job 'no-such-run'" in other.errors, "an unknown run id: exit 3, one line", shown(other))
        check(time.monotonic() - started < 10, "an unknown run id answered within 10 s", shown(other))

        # Rank 3 fails; the job restarts: restarts 1, the last failure's rank and reason.
        open(os.path.join(work, "go.0"), "w").close()
        wait_for(lambda: len(pids_of(work, 1)) == 4, deadline, 60, "the restarted workers did not start", jobs)
        pids = pids_of(work, 1)
        value = poll_json(args, job_args, deadline,
                          lambda v: v["restarts"] == 1 and sorted(
                              w["pid"] for n in v["nodes"] for w in n["workers"]
                              if w["state"] == "running") == sorted(pids.values()),
                          "status --json never showed the restart's workers %s" % pids, jobs)
        failure = value["last_failure"]
        check(failure is not None and failure["rank"] == 3 and "ValueError: boom at step 7" in failure["reason"]
              and "exitcode 3" in failure["reason"], "the last failure after the restart", value)
        text = status(args.ddprun, job_args)
        check("restarts 1 of 1" in text.output and
              "last failure: rank 3 (local 1) on " in text.output and
              ": exitcode 3: ValueError: boom at step 7 (worker failure)\n" in text.output,
              "the text after the restart (the failure's class last)", shown(text))

        # The end.
        open(os.path.join(work, "go.1"), "w").close()
        wait_all(agents, deadline, "the job")
        for agent in agents:
            check(agent.returncode == 0, "%s exits 0" % agent.name, agent.describe())
        return job_args
    finally:
        for agent in agents:
            agent.kill()


def after_end_nothing_answers(args, job_args, jobs):
    started = time.monotonic()
    done = status(args.ddprun, job_args)
    Check(jobs)(done.returncode == 3 and done.output == "" and len(done.errors.splitlines()) == 1
                and "no job" in done.errors, "after the end: exit 3, one line", shown(done))
    Check(jobs)(time.monotonic() - started < 10, "after the end: answered within 10 s", shown(done))


def c10d(args, work):
    job_args = scenario(args, work, "127.0.0.1:%d" % free_port(), "c10d", "", [])
    after_end_nothing_answers(args, job_args, [])


def daemon(args, work, tls=False):
    token = os.path.join(work, "job.token")
    with open(token, "w") as f:
        f.write(secrets.token_hex(32))
    os.chmod(token, 0o600)
    daemon_tls, conf = [], "token_file=" + token
    if tls:
        cert, key = os.path.join(work, "job.crt"), os.path.join(work, "job.key")
        made = run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                    "-nodes", "-days", "1", "-subj", "/CN=status-test", "-keyout", key, "-out", cert], 30,
                   name="openssl")
        if made.returncode != 0:
            give_up("openssl could not make the test's certificate", [made])
        os.chmod(key, 0o600)
        daemon_tls = ["--tls-cert", cert, "--tls-key", key]
        conf += ",tls_cert=%s,tls_key=%s" % (cert, key)
    # Port 0, the port it got read from its first line: a port picked here could be taken by
    # another test before the daemon binds it.
    server = Job([args.daemon, "--host", "127.0.0.1", "--port", "0", "--token-file", token, *daemon_tls],
                 name="ddprun-rendezvous")
    line = server.read_line(20) or ""
    if "listening on 127.0.0.1:" not in line:
        give_up("ddprun-rendezvous did not say where it listens (%r)" % line, [server])
    port = int(line.rsplit(":", 1)[1].split()[0])
    try:
        job_args = scenario(args, work, "127.0.0.1:%d" % port, "c10d", conf, [server])
        check = Check([server])
        if tls:
            no_tls = status(args.ddprun, job_args[:-2], "--rdzv-conf", "token_file=" + token)
            check(no_tls.returncode == 2 and len(no_tls.errors.splitlines()) == 1 and "TLS" in no_tls.errors,
                  "without the TLS files: exit 2, one line naming TLS", shown(no_tls))
        no_token = status(args.ddprun, [a for a in job_args[:-2]])
        check(no_token.returncode == 2 and len(no_token.errors.splitlines()) == 1
              and ("token" in no_token.errors or "TLS" in no_token.errors),
              "without the token: exit 2, one line naming the token", shown(no_token))
        done = status(args.ddprun, job_args)
        check(done.returncode == 4 and done.output.startswith(
            "job '%s' has ended: succeeded (exit code 0), round 1, restarts 1 of 1\n" % job_args[5]),
            "after the end: 'has ended', exit 4", shown(done))
        check("agent pid" in done.output and ": finished, exit code 0" in done.output, "nodes finished", shown(done))
        done = status(args.ddprun, job_args, "--json")
        value = json.loads(done.output) if done.output else {}
        check(done.returncode == 4 and value.get("state") == "ended" and value.get("exit_code") == 0,
              "--json after the end", shown(done))
    finally:
        server.kill()


def etcd(args, work):
    if not os.path.exists("/usr/bin/etcd"):
        print("SKIP: no /usr/bin/etcd (apt-get install etcd-server)")
        sys.exit(SKIP)
    client, peer = free_port(), free_port()
    server = Job(["/usr/bin/etcd", "--name", "s", "--data-dir", os.path.join(work, "etcd"),
                  "--listen-client-urls", "http://127.0.0.1:%d" % client,
                  "--advertise-client-urls", "http://127.0.0.1:%d" % client,
                  "--listen-peer-urls", "http://127.0.0.1:%d" % peer,
                  "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % peer,
                  "--initial-cluster", "s=http://127.0.0.1:%d" % peer], name="etcd")
    try:
        end = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", client), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > end or server.returncode is not None:
                    give_up("etcd did not start", [server])
                time.sleep(0.2)
        job_args = scenario(args, work, "127.0.0.1:%d" % client, "etcd", "", [server])
        after_end_nothing_answers(args, job_args, [server])
    finally:
        server.kill()


# The characters a terminal acts on or shows out of order: C0 but the line end, DEL, C1, bidi.
BIDI = set(range(0x202A, 0x202F)) | set(range(0x2066, 0x206A)) | {0x200E, 0x200F, 0x061C}
HOSTILE = "x\x1b[2J\x07\r\x7f\nforged line\u009b31m\u202egnp.exe\u2066\u200f\u061c \u6f22\u5b57"


def unsafe_in(text, line_ends=True):
    return ["U+%04X at %d" % (ord(c), i) for i, c in enumerate(text)
            if (ord(c) < 0x20 and not (line_ends and c == "\n")) or 0x7F <= ord(c) <= 0x9F
            or ord(c) in BIDI]


def raw_store(port):
    """torch's own TCPStore client on the job's store: what anyone who reaches it (no token) has."""
    import datetime
    import torch.distributed as dist
    return dist.TCPStore("127.0.0.1", port, None, False, datetime.timedelta(seconds=10))


def start_agents(args, work, job_args, nodes=(0, 1)):
    script = os.path.join(work, "worker.py")
    with open(script, "w") as f:
        f.write(WORKER)
    env = dict(os.environ, LOGLEVEL="INFO")
    return [Job([args.ddprun, "--nnodes", "2", "--nproc-per-node", "2", "--max-restarts", "1",
                 *job_args, script, work], name="agent %d" % n, env=env, cwd=work) for n in nodes]


def finish(agents, work, deadline, check):
    """Lets the workers end (rank 3 fails once, the restart succeeds): every agent exits 0."""
    for restart in (0, 1):
        open(os.path.join(work, "go.%d" % restart), "w").close()
    wait_all(agents, deadline, "the job")
    for agent in agents:
        check(agent.returncode == 0, "%s exits 0" % agent.name, agent.describe())


def hostile_values(args, work):
    deadline = Deadline(150)
    port = free_port()
    run_id = "status-" + secrets.token_hex(4)
    job_args = ["--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:%d" % port, "--rdzv-id", run_id]
    agents = start_agents(args, work, job_args)
    check = Check(agents)
    try:
        wait_for(lambda: len(pids_of(work, 0)) == 4, deadline, 60, "the 4 workers did not start", agents)
        value = poll_json(args, job_args, deadline,
                          lambda v: sum(w["state"] == "running" for n in v["nodes"] for w in n["workers"]) == 4,
                          "status --json never showed the 4 running workers", agents)
        forged = dict(value["nodes"][0])
        forged.pop("stale")
        forged.update(hostname=HOSTILE, addr=HOSTILE, run_id=HOSTILE, group_rank=-1, agent_pid=1)
        store = raw_store(port)
        prefix = "ddprun/%s/status/" % run_id
        store.set(prefix + "999", b"{" * (2 << 20))
        store.set(prefix + "998", json.dumps(forged, ensure_ascii=False).encode())
        # torch's set sends and returns; a read on the same connection is answered after both.
        check(store.get(prefix + "998") == json.dumps(forged, ensure_ascii=False).encode(),
              "the forged snapshot is in the store")

        started = time.monotonic()
        text = status(args.ddprun, job_args)
        check(time.monotonic() - started < 10, "status answered within 10 s", shown(text))
        check(text.returncode == 0, "with a 2 MiB value under the status prefix: exit 0, the job shown",
              shown(text))
        check(text.output.startswith("job '%s': round 0, restarts 0 of 1, 3 nodes\n" % run_id)
              and "\nnode 0 on " in text.output and "\nnode 1 on " in text.output,
              "both nodes shown (and the forged one)", shown(text))
        check("(not shown: '%s999' holds %d bytes, too large for a snapshot (at most 65536))\n"
              % (prefix, 2 << 20) in text.output, "the large key named as too large", shown(text))
        check(unsafe_in(text.output) == [], "no control or bidi character in the text: %s"
              % unsafe_in(text.output), shown(text))
        check("\\x1b[2J\\x07\\x0d\\x7f\\nforged line\\xc2\\x9b31m\\u202egnp.exe\\u2066\\u200f\\u061c \u6f22\u5b57"
              in text.output, "the forged host name shown escaped, its UTF-8 text readable", shown(text))

        done = status(args.ddprun, job_args, "--json")
        check(done.returncode == 0, "--json with a 2 MiB value: exit 0", shown(done))
        check(unsafe_in(done.output.rstrip("\n"), line_ends=False) == [],
              "no control or bidi character in --json's bytes: %s" % unsafe_in(done.output), shown(done))
        check("\u6f22\u5b57" in done.output, "--json keeps plain UTF-8 readable", shown(done))
        value = json.loads(done.output)
        check(sorted(n["group_rank"] for n in value["nodes"]) == [-1, 0, 1], "--json: every node", value)
        node = [n for n in value["nodes"] if n["group_rank"] == -1][0]
        check(node["hostname"] == HOSTILE and node["addr"] == HOSTILE and node["run_id"] == HOSTILE,
              "--json holds the forged values exactly", node)
        check({"key": prefix + "999", "reason": "too_large", "bytes": 2 << 20} in value["unreadable"],
              "--json names the large key", value["unreadable"])
        store.delete_key(prefix + "998")
        finish(agents, work, deadline, check)
    finally:
        for agent in agents:
            agent.kill()


def first_second(args, work):
    deadline = Deadline(150)
    port = free_port()
    run_id = "status-" + secrets.token_hex(4)
    job_args = ["--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:%d" % port, "--rdzv-id", run_id]
    agents = start_agents(args, work, job_args, nodes=(0,))
    joined_line = "rendezvous round 0 of run '%s': 1 node(s) joined" % run_id
    check = Check(agents)
    calls, seen, records_lines = 0, [], 0
    end = time.monotonic() + 60
    try:
        while True:
            check(calls < 400 and time.monotonic() < end,
                  "the snapshots never showed 4 running workers within 400 calls and 60 s",
                  "\n".join(seen[-5:]))
            joined = joined_line in agents[0].errors  # before the call: the records were there
            as_json = calls % 2 == 1
            done = status(args.ddprun, job_args, *(["--json"] if as_json else []))
            calls += 1
            seen.append("call %d (joined before it: %s): %s" % (calls, joined, shown(done)))
            if joined:
                check(done.returncode == 0 and "no job" not in done.errors,
                      "status after the agent joined round 0: exit 0, never 'no job'", seen[-1])
            if done.returncode != 0:
                continue
            if as_json:
                value = json.loads(done.output)
                if not value["nodes"]:
                    check(value["state"] in ("joining", "forming", "starting"), "--json's state", seen[-1])
                if sum(w["state"] == "running" for n in value["nodes"] for w in n["workers"]) == 4:
                    break
            elif "no status published yet" in done.output:
                records_lines += 1
                check(re.fullmatch(r"job '%s': (round 0 (forming|starting), [12] nodes? joined|joining, [12] "
                                   r"nodes? registered, no round yet), no status published yet\n" % run_id,
                                   done.output), "the round records' line", seen[-1])
            if len(agents) == 1 and joined:
                agents += start_agents(args, work, job_args, nodes=(1,))  # the round can form
        print("%d status calls; %d said what the round records say (before any snapshot)" % (calls, records_lines))
        finish(agents, work, deadline, check)
    finally:
        for agent in agents:
            agent.kill()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ddprun", required=True)
    parser.add_argument("--daemon")
    parser.add_argument("--scenario", required=True,
                        choices=["c10d", "daemon", "daemon-tls", "etcd", "hostile-values", "first-second"])
    args = parser.parse_args()
    args.ddprun = os.path.abspath(args.ddprun)
    work = tempfile.mkdtemp(prefix="ddprun-status-test-")
    try:
        scenarios = {"c10d": c10d, "daemon": daemon, "daemon-tls": lambda a, w: daemon(a, w, tls=True),
                     "etcd": etcd, "hostile-values": hostile_values, "first-second": first_second}
        scenarios[args.scenario](args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("PASS: %s" % args.scenario)


if __name__ == "__main__":
    main()
