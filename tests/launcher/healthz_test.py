#!/usr/bin/env python3
"""/healthz under the real ddprun and ddprun-rendezvous (issue #21, point 6; issue #34, point 2).

  healthz_test.py --ddprun BIN --rendezvous BIN --scenario agent|joining|bad-port|daemon

agent     TORCHELASTIC_HEALTH_CHECK_PORT=0 (a free port, named in the agent's log): 200 with the
          agent's snapshot (state running, both workers with their real pids), then rank 1 stops
          its heartbeat (--hang-timeout 2) and /healthz answers 503 (a worker hung, or the agent
          stopping) with the failure as ranks, codes and kind (no message, no path), and once the
          agent has exited its port is closed. No host name or address in the body; a request
          with Host: evil.example (a DNS-rebinding page's) is 421 without it.
joining   an agent waiting for the second node of a 2-node job answers 200, state joining, no
          workers; SIGTERM ends it and closes the port.
bad-port  a value that is no port number, and a port that is taken: one line naming the
          variable (and the port), exit 2, before any worker starts.
daemon    ddprun-rendezvous --health-port 0: 200 with its state while it serves (a client
          connected counts), then SIGTERM: 503 while it drains or refused once it is gone, exit 0;
          a bad --health-port or --health-hosts is exit 2; a --health-hosts name is taken as Host,
          another name is 421.

Every wait is bounded by one deadline well below CTest's TIMEOUT; polls are every 50 ms.
"""
import argparse
import http.client
import json
import os
import re
import signal
import socket
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "workers", "healthz_worker.py")
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from jobs import Deadline, Job, give_up, run  # noqa: E402

POLL = 0.05


def check(condition, why, jobs=()):
    if not condition:
        give_up(why, list(jobs))


def ask(address, method="GET", path="/healthz"):
    """(status, parsed JSON body or None) from http://address/path, or None when refused."""
    host, port = address.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=5)
    try:
        connection.request(method, path)
        response = connection.getresponse()
        text = response.read().decode()
        return response.status, (json.loads(text) if text else None)
    except (ConnectionRefusedError, ConnectionResetError, http.client.RemoteDisconnected):
        return None
    except socket.timeout:
        return ("timeout", None)  # accepted but never answered: what a probe must not see
    finally:
        connection.close()


def ask_host(address, host):
    """The status /healthz answers a GET whose Host header is `host` (a DNS-rebinding page's)."""
    name, port = address.rsplit(":", 1)
    connection = http.client.HTTPConnection(name, int(port), timeout=5)
    try:
        connection.putrequest("GET", "/healthz", skip_host=True)
        connection.putheader("Host", host)
        connection.endheaders()
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


def poll(address, until, deadline, seconds, jobs):
    """Asks every POLL seconds until `until(answer)`; the answers seen go into the failure."""
    seen = []
    end = time.monotonic() + deadline.cap(seconds)
    while time.monotonic() < end:
        answer = ask(address)
        if not seen or seen[-1] != answer:
            seen.append(answer)
        if until(answer):
            return answer
        time.sleep(POLL)
    give_up(f"/healthz at {address} never answered as expected within {seconds} s; it answered, "
            f"in order: {seen[-5:]}", jobs)


def wait_for(predicate, deadline, seconds):
    end = time.monotonic() + deadline.cap(seconds)
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(POLL)
    return None


def health_address(job, deadline):
    """The agent's /healthz address, from its log line."""
    def found():
        match = re.search(r"serving /healthz on http://([0-9.]+:\d+)/healthz", job.errors)
        return match.group(1) if match else None
    return wait_for(found, deadline, 30) or give_up("the agent never said where /healthz is", [job])


def agent(args, deadline):
    scratch = tempfile.mkdtemp(prefix="ddprun-healthz-")
    hang_file = os.path.join(scratch, "hang")
    env = dict(os.environ, PYTHON_EXEC=sys.executable, LOGLEVEL="INFO", TORCHELASTIC_HEALTH_CHECK_PORT="0",
               HEALTHZ_HANG_FILE=hang_file, DDPRUN_HANG_DEBUGGER="")
    job = Job([args.ddprun, "--standalone", "--nproc-per-node", "2", "--hang-timeout", "2",
               "--shutdown-timeout", "3", WORKER], name="ddprun", env=env)
    try:
        address = health_address(job, deadline)
        check(address.startswith("127.0.0.1:"), f"/healthz listens on loopback by default ({address})", [job])

        # Both workers running and each past its first progress report: --hang-timeout monitors a
        # worker only once it has reported, so the hang must come after that.
        def running(answer):
            return (answer and answer[0] == 200 and answer[1]["state"] == "running"
                    and len(answer[1]["workers"]) == 2
                    and all("last_heartbeat" in worker for worker in answer[1]["workers"]))
        status, body = poll(address, running, deadline, 30, [job])
        check(body["healthy"] is True and body["agent_pid"] == job.pid, f"a healthy snapshot of this agent: {body}",
              [job])
        for worker in body["workers"]:
            check(worker["state"] == "running", f"each worker runs: {worker}", [job])
            try:
                with open(f"/proc/{worker['pid']}/cmdline", "rb") as cmdline:
                    check(b"healthz_worker.py" in cmdline.read(), f"pid {worker['pid']} is a worker", [job])
            except OSError:
                give_up(f"worker pid {worker['pid']} from /healthz is no process", [job])
        check("hostname" not in body and "addr" not in body, f"no host name or address in /healthz: {body}", [job])
        check(ask(address, "HEAD")[0] == 200, "HEAD /healthz is 200 too", [job])
        status, text = ask_host(address, f"evil.example:{address.rsplit(':', 1)[1]}")
        check(status == 421 and "running" not in text, f"a rebinding page's Host is 421 without the body: "
              f"{status} {text}", [job])
        check(ask_host(address, "localhost")[0] == 200, "Host: localhost is taken on loopback", [job])
        check(ask(address, path="/other")[0] == 404, "another path is 404", [job])
        print(f"agent: 200 while running, workers {[w['pid'] for w in body['workers']]}")

        started = time.monotonic()
        open(hang_file, "w").close()
        status, body = poll(address, lambda answer: answer and answer[0] == 503, deadline, 40, [job])
        states = [w["state"] for w in body["workers"]]
        check(body["healthy"] is False and (body["state"] == "stopping" or "hung" in states),
              f"the 503 body says a worker is hung or the agent is stopping: {body}", [job])
        failure = poll(address, lambda a: a is None or (a[1] or {}).get("last_failure"), deadline, 30, [job])
        if failure is not None:  # the agent may be gone by now; while it answers, the failure is bare
            last = failure[1]["last_failure"]
            print(f"agent: /healthz last failure {last}")
            check(set(last) == {"rank", "local_rank", "group_rank", "exit_code", "signal", "observed_at", "hang",
                                "oom"} and last["hang"] == "no_progress",
                  f"/healthz's last failure: ranks, codes and kind, no message or path: {last}", [job])
        print(f"agent: 503 {time.monotonic() - started:.1f} s after rank 1 stopped reporting "
              f"(state {body['state']}, workers {states})")

        code = job.wait(deadline.cap(60))
        check(code is not None, "the agent ends after the hung worker", [job])
        check(code != 0, f"a job whose worker hung fails (exit {code})", [job])
        check("is hung: no progress reported for" in job.errors, "the agent says rank 1 is hung", [job])
        check(ask(address) is None, "once the agent has exited, its /healthz port is closed", [job])
    finally:
        job.kill()
        for name in os.listdir(scratch):
            os.unlink(os.path.join(scratch, name))
        os.rmdir(scratch)


def joining(args, deadline):
    env = dict(os.environ, PYTHON_EXEC=sys.executable, LOGLEVEL="INFO", TORCHELASTIC_HEALTH_CHECK_PORT="0",
               HEALTHZ_HANG_FILE="/nonexistent")
    job = Job([args.ddprun, "--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:0",
               "--rdzv-id", "healthz-joining", WORKER], name="ddprun", env=env)
    try:
        address = health_address(job, deadline)
        status, body = poll(address, lambda a: a and a[0] == 200, deadline, 20, [job])
        check(body["state"] == "joining" and body["healthy"] is True and body["workers"] == []
              and body["run_id"] == "healthz-joining", f"a joining agent is healthy: {body}", [job])
        print(f"joining: 200 {body['state']}, round {body['round']}")
        job.signal(signal.SIGTERM)
        code = job.wait(deadline.cap(30))
        check(code is not None, "the joining agent ends on SIGTERM", [job])
        check(ask(address) is None, "once the agent has exited, its /healthz port is closed", [job])
    finally:
        job.kill()


def bad_port(args, deadline):
    for value, says in (("70000", "is not a port number"), ("http", "is not a port number")):
        env = dict(os.environ, PYTHON_EXEC=sys.executable, TORCHELASTIC_HEALTH_CHECK_PORT=value)
        job = run([args.ddprun, "--standalone", WORKER], deadline.cap(30), env=env)
        lines = job.errors.strip().splitlines()
        check(job.returncode == 2, f"TORCHELASTIC_HEALTH_CHECK_PORT={value}: exit 2 (got {job.returncode})", [job])
        check(len(lines) == 1 and f"TORCHELASTIC_HEALTH_CHECK_PORT='{value}' {says}" in lines[0],
              f"one line naming the variable: {lines}", [job])
        check("hang file seen" not in job.output, "no worker started", [job])
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    try:
        env = dict(os.environ, PYTHON_EXEC=sys.executable, TORCHELASTIC_HEALTH_CHECK_PORT=str(port))
        job = run([args.ddprun, "--standalone", WORKER], deadline.cap(30), env=env)
    finally:
        taken.close()
    lines = job.errors.strip().splitlines()
    check(job.returncode == 2, f"a taken port: exit 2 (got {job.returncode})", [job])
    check(len(lines) == 1 and f"TORCHELASTIC_HEALTH_CHECK_PORT={port}: cannot listen on 127.0.0.1:{port}"
          in lines[0], f"one line naming the variable and the port: {lines}", [job])
    print(f"bad-port: {lines[0]}")


def daemon(args, deadline):
    bad = run([args.rendezvous, "--port", "0", "--health-port", "65536"], deadline.cap(30))
    check(bad.returncode == 2 and "--health-port 65536" in bad.errors, "a bad --health-port is exit 2", [bad])
    bad = run([args.rendezvous, "--port", "0", "--health-port", "0", "--health-hosts", "ok.example,a b"],
              deadline.cap(30))
    check(bad.returncode == 2 and bad.errors.count("\n") == 1 and "--health-hosts: 'a b' is not a host name"
          in bad.errors, f"a bad --health-hosts is one line and exit 2: {bad.errors!r}", [bad])

    job = Job([args.rendezvous, "--port", "0", "--health-port", "0", "--health-hosts", "store.example"],
              name="ddprun-rendezvous")
    try:
        listening = job.read_line(deadline.cap(30)) or give_up("the daemon did not start", [job])
        health = job.read_line(deadline.cap(10)) or give_up("the daemon did not say where /healthz is", [job])
        check(listening.startswith("listening on ") and health.startswith("health on 127.0.0.1:"),
              f"the daemon's two lines: {listening!r}, {health!r}", [job])
        store = listening.split()[-1]
        address = health.split()[-1]
        host, port = store.rsplit(":", 1)
        client = socket.create_connection((host, int(port)), timeout=5)
        try:
            status, body = poll(address, lambda a: a and a[0] == 200 and a[1]["connections"] >= 1, deadline, 20,
                                [job])
        finally:
            client.close()
        check(body["state"] == "serving" and body["healthy"] is True and body["address"] == store
              and "version" in body and body["uptime_s"] >= 0 and body["keys"] == 0,
              f"the daemon's state: {body}", [job])
        check(ask_host(address, "store.example:80")[0] == 200, "a --health-hosts name is taken", [job])
        check(ask_host(address, "evil.example")[0] == 421, "another name is 421", [job])
        print(f"daemon: 200 {body}")
        job.signal(signal.SIGTERM)
        answer = poll(address, lambda a: a is None or a[0] == 503, deadline, 20, [job])
        check(answer is None or answer[1]["state"] == "draining", f"503 says draining: {answer}", [job])
        code = job.wait(deadline.cap(20))
        check(code == 0, f"the daemon exits 0 on SIGTERM (got {code})", [job])
        check(ask(address) is None, "once the daemon has exited, its /healthz port is closed", [job])
        print(f"daemon: after SIGTERM {'refused' if answer is None else answer[0]}, exit 0")
    finally:
        job.kill()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ddprun", required=True)
    parser.add_argument("--rendezvous", required=True)
    parser.add_argument("--scenario", required=True, choices=["agent", "joining", "bad-port", "daemon"])
    parser.add_argument("--timeout", type=float, default=100)
    args = parser.parse_args()
    deadline = Deadline(args.timeout)
    {"agent": agent, "joining": joining, "bad-port": bad_port, "daemon": daemon}[args.scenario](args, deadline)
    print(f"{args.scenario}: as expected")
    return 0


if __name__ == "__main__":
    sys.exit(main())
