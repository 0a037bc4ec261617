#!/usr/bin/env python3
"""/metrics and the incident timeline under the real ddprun and ddprun-rendezvous (issue 39).

  metrics_test.py --ddprun BIN --rendezvous BIN --scenario agent|daemon

agent   a one-node c10d job of 2 workers (--max-restarts 3, --hang-timeout 30, heartbeats every
        0.1 s) whose rank 1 fails in the first attempt and rank 0 in the second: two restarts.
        While the third attempt runs, /metrics is scraped and parsed by prometheus_client's own
        parser (Debian's python3-prometheus-client): the store this agent hosts (its connections
        and operations, labelled store="rendezvous"), restarts of class worker 2, two closed
        worker_failed incidents, each duration histogram counting 2, a heartbeat age for both
        ranks, 2 workers running, the job's restarts 2. `ddprun status --json` shows both
        incidents with every timestamp in order (failed <= detected <= decided <= running <
        progress) and `ddprun status --watch=0.5` redraws it (at least twice within 4 s). Then the
        job finishes 0, and its console events hold two ddprun.incident records in the same order.
daemon  ddprun-rendezvous --health-port 0 with a torch TCPStore client that sets, gets and adds:
        /metrics parsed by prometheus_client, the client's connection counted and each op's count
        at least what the client sent; a path that is neither is 404.

Every wait is bounded by one deadline well below CTest's TIMEOUT; polls are every 0.1 s.
"""
import argparse
import http.client
import json
import os
import re
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "workers", "metrics_worker.py")
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from jobs import Deadline, Job, give_up, run  # noqa: E402
from ports import free_port  # noqa: E402

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:
    print("SKIP: python3-prometheus-client is not installed (scripts/install-deps.sh installs it)")
    sys.exit(77)

POLL = 0.1


def check(condition, why, jobs=()):
    if not condition:
        give_up(why, list(jobs))


def fetch(address, path):
    """(status, body text) of GET http://address/path, or None when refused."""
    host, port = address.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=5)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.getheader("Content-Type"), response.read().decode()
    except (ConnectionRefusedError, ConnectionResetError, http.client.RemoteDisconnected):
        return None
    finally:
        connection.close()


def scrape(address, jobs):
    """{(name, frozenset(labels)): value} of every sample, parsed by prometheus_client."""
    answer = fetch(address, "/metrics")
    check(answer is not None and answer[0] == 200, f"/metrics answers 200: {answer}", jobs)
    check(answer[1].startswith("text/plain; version=0.0.4"), f"the text format's type: {answer[1]}", jobs)
    samples = {}
    families = {}
    try:
        for family in text_string_to_metric_families(answer[2]):
            families[family.name] = family.type
            for sample in family.samples:
                samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    except ValueError as error:
        give_up(f"prometheus_client cannot parse /metrics: {error}\n{answer[2][:3000]}", jobs)
    return samples, families, answer[2]


def value(samples, name, **labels):
    return samples.get((name, frozenset(labels.items())))


def wait_for(predicate, deadline, seconds):
    end = time.monotonic() + deadline.cap(seconds)
    while time.monotonic() < end:
        result = predicate()
        if result:
            return result
        time.sleep(POLL)
    return None


def in_order(incident):
    times = [incident.get(k) for k in ("failed_at", "detected_at", "decided_at", "running_at", "progress_at")]
    return (None not in times and times[0] <= times[1] <= times[2] <= times[3] < times[4]
            and abs(incident["lost_s"] - (times[4] - times[0])) < 1e-6)


def agent(args, deadline):
    scratch = tempfile.mkdtemp(prefix="ddprun-metrics-")
    done = os.path.join(scratch, "done")
    port = free_port()
    endpoint = ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "metrics"]
    env = dict(os.environ, PYTHON_EXEC=sys.executable, LOGLEVEL="INFO", TORCHELASTIC_HEALTH_CHECK_PORT="0",
               METRICS_DONE_FILE=done)
    job = Job([args.ddprun, "--nnodes", "1", *endpoint, "--nproc-per-node", "2", "--max-restarts", "3",
               "--hang-timeout", "30", "--event-log-handler", "console", WORKER], name="ddprun", env=env)
    try:
        def found():
            match = re.search(r"/metrics on http://([0-9.]+:\d+)/metrics", job.errors)
            return match.group(1) if match else None
        address = wait_for(found, deadline, 30) or give_up("the agent never said where /metrics is", [job])

        # The third attempt runs, and its first progress has been seen: both incidents closed.
        def settled():
            samples, _, _ = scrape(address, [job])
            closed = value(samples, "ddprun_incidents_total", kind="worker_failed", **{"class": "worker"})
            return samples if closed == 2 else None
        samples = wait_for(settled, deadline, 60)
        if samples is None:
            give_up(f"/metrics never counted two closed incidents; it said:\n{scrape(address, [job])[2]}", [job])
        samples, families, text = scrape(address, [job])
        print("agent: /metrics parsed by prometheus_client: %d families, %d samples"
              % (len(families), len(samples)))
        check(families.get("ddprun_incident_lost_seconds") == "histogram"
              and families.get("ddprun_restarts") == "counter" and families.get("ddprun_workers") == "gauge",
              f"the families' types: {families}", [job])
        expected = {
            ("ddprun_restarts_total", (("class", "worker"),)): 2,
            ("ddprun_restarts_total", (("class", "machine"),)): 0,
            ("ddprun_job_restarts", ()): 2,
            ("ddprun_rounds_formed_total", ()): 3,
            ("ddprun_workers", (("state", "running"),)): 2,
            ("ddprun_incident_detection_seconds_count", ()): 2,
            ("ddprun_incident_recovery_seconds_count", ()): 2,
            ("ddprun_incident_progress_seconds_count", ()): 2,
            ("ddprun_incident_lost_seconds_count", ()): 2,
            ("torchelastic_workers_run_total", (("role", "default"),)): 0,
            ("ddprun_agent_healthy", ()): 1,
        }
        for (name, labels), want in expected.items():
            got = value(samples, name, **dict(labels))
            check(got == want, f"{name}{dict(labels)} is {want}: {got}\n{text}", [job])
        for rank in ("0", "1"):
            age = value(samples, "ddprun_worker_heartbeat_age_seconds", rank=rank, local_rank=rank)
            check(age is not None and 0 <= age < 5, f"rank {rank}'s heartbeat age: {age}", [job])
        # This agent hosts the job's rendezvous store (c10d): its figures, labelled, on the page.
        holds = value(samples, "ddprun_store_operations_total", store="rendezvous", op="HOLD")
        check(value(samples, "ddprun_store_connections", store="rendezvous") >= 1 and holds and holds >= 1,
              f"the hosted rendezvous store's connections and operations:\n{text}", [job])
        lost = value(samples, "ddprun_incident_lost_seconds_sum")
        check(lost is not None and 0 < lost < 30, f"two incidents' lost seconds, summed: {lost}", [job])
        print(f"agent: restarts by class worker 2, incidents 2, {lost:.2f} s lost in all")

        # The agent publishes a changed snapshot within half a second (agent/status_feed.h).
        def both_published():
            status = run([args.ddprun, "status", *endpoint, "--json"], deadline.cap(20), name="ddprun status")
            check(status.returncode == 0, f"ddprun status exits 0 while the job runs: {status.returncode}",
                  [job, status])
            incidents = json.loads(status.output)["incidents"]
            return incidents if len(incidents) == 2 and all(i["closed"] for i in incidents) else None
        incidents = wait_for(both_published, deadline, 10) or give_up(
            "ddprun status never showed two closed incidents within 10 s", [job])
        check(len(incidents) == 2 and all(i["kind"] == "worker_failed" and i["outcome"] == "restarted"
                                          and i["failure_class"] == "worker" and i["closed"] for i in incidents),
              f"status shows the two restarted incidents: {incidents}", [job])
        check([i["rank"] for i in incidents] == [1, 0], f"oldest first: rank 1, then rank 0: {incidents}", [job])
        for incident in incidents:
            check(in_order(incident), f"every timestamp in order: {incident}", [job])
        print("agent: status --json: " + "; ".join(
            f"rank {i['rank']}: detected +{i['detected_at'] - i['failed_at']:.2f} s, running "
            f"+{i['running_at'] - i['failed_at']:.2f} s, progress +{i['progress_at'] - i['failed_at']:.2f} s"
            for i in incidents))

        watch = Job([args.ddprun, "status", *endpoint, "--watch=0.5"], name="ddprun status --watch")
        time.sleep(4)
        watch.kill()
        screens = watch.output.count("incidents (2, oldest first")
        check(screens >= 2, f"--watch=0.5 drew the status again and again in 4 s: {screens}", [job, watch])
        bad = run([args.ddprun, "status", *endpoint, "--watch=0"], deadline.cap(20), name="ddprun status")
        check(bad.returncode == 2 and "--watch=0" in bad.errors, f"--watch=0 is exit 2 naming it: {bad.errors}",
              [job, bad])

        open(done, "w").close()
        code = job.wait(deadline.cap(60))
        check(code == 0, f"the job finishes 0 after its two restarts: {code}", [job])
        events = [json.loads(line) for line in job.errors.splitlines()
                  if line.startswith("{") and '"ddprun.incident"' in line]
        records = [json.loads(event["metadata"]["metadata"]) for event in events]
        check(len(records) == 2 and [r["rank"] for r in records] == [1, 0] and all(in_order(r) for r in records),
              f"two ddprun.incident events, in order, each timeline in order: {records}", [job])
        check(len(re.findall(r"incident: round \d+, worker_failed", job.errors)) == 2,
              "one incident line per failure in the agent's log", [job])
    finally:
        job.kill()
        shutil.rmtree(scratch, ignore_errors=True)


def daemon(args, deadline):
    import torch.distributed as dist  # the workers' own client: what a job sends

    server = Job([args.rendezvous, "--port", "0", "--health-port", "0"], name="ddprun-rendezvous")
    try:
        listening = server.read_line(deadline.cap(20)) or ""
        health = server.read_line(deadline.cap(20)) or ""
        check(listening.startswith("listening on ") and health.startswith("health on "),
              f"the daemon's two lines: {listening!r} {health!r}", [server])
        store_port = int(listening.strip().rsplit(":", 1)[1])
        address = health.strip().split(" ", 2)[2]
        store = dist.TCPStore("127.0.0.1", store_port, is_master=False, timeout=__import__("datetime").timedelta(seconds=10))
        for i in range(5):
            store.set(f"key{i}", "value")
        store.get("key0")
        store.add("counter", 3)
        samples, families, text = scrape(address, [server])
        check(value(samples, "ddprun_store_connections") >= 1, f"the client's connection counted:\n{text}", [server])
        check(value(samples, "ddprun_store_operations_total", op="SET") >= 5
              and value(samples, "ddprun_store_operations_total", op="GET") >= 1
              and value(samples, "ddprun_store_operations_total", op="ADD") >= 1,
              f"each op's count at least what the client sent:\n{text}", [server])
        check(value(samples, "ddprun_rendezvous_serving") == 1 and value(samples, "ddprun_store_keys") >= 6,
              f"serving, the keys held:\n{text}", [server])
        check(fetch(address, "/nothing")[0] == 404, "another path is 404", [server])
        print("daemon: /metrics parsed by prometheus_client: SET %d, GET %d, ADD %d, %d connection(s)"
              % (value(samples, "ddprun_store_operations_total", op="SET"),
                 value(samples, "ddprun_store_operations_total", op="GET"),
                 value(samples, "ddprun_store_operations_total", op="ADD"), value(samples, "ddprun_store_connections")))
        del store
    finally:
        server.kill()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ddprun", required=True)
    parser.add_argument("--rendezvous", required=True)
    parser.add_argument("--scenario", required=True, choices=["agent", "daemon"])
    args = parser.parse_args()
    deadline = Deadline(120)
    {"agent": agent, "daemon": daemon}[args.scenario](args, deadline)
    print("PASS")


if __name__ == "__main__":
    main()
