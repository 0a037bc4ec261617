#!/usr/bin/python3
"""/metrics: what a scrape costs the agent, side by side with its anchors in one run
(docs/benchmarks.md, "/metrics: what a scrape costs").

One agent with --nproc-per-node N (64 by default) workers that each report progress once and then
sleep (so every rank has a heartbeat age on the page), serving TORCHELASTIC_HEALTH_CHECK_PORT.
Per path, --scrapes requests one after another, each on its own connection (as Prometheus and a
probe make them):

  /metrics   the page (N workers' rows, every family)
  /healthz   the JSON snapshot the same server answers from the same snapshot
  /nothing   a 404 from the same server: the connection, the parse and an answer (the floor)

For each: the client's time per request (connect, request, whole answer; median and p99) and the
agent's CPU per request (its utime + stime over the run, /proc/<pid>/stat, less the same time idle).
There is no torchrun anchor: torchrun's health-check server is a stub that serves nothing.
"""
import argparse
import http.client
import os
import statistics
import subprocess
import sys
import tempfile
import time

import bench_json  # (--json: the printed tables as one document)


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def request(port, path):
    started = time.perf_counter()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    connection.request("GET", path)
    response = connection.getresponse()
    body = response.read()
    connection.close()
    return time.perf_counter() - started, response.status, len(body)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ddprun", required=True)
    parser.add_argument("--nproc", type=int, default=64)
    parser.add_argument("--scrapes", type=int, default=2000)
    bench_json.add_option(parser)
    args = parser.parse_args()
    bench_json.record(args, "metrics")

    scratch = tempfile.mkdtemp(prefix="ddprun-bench-metrics-")
    log = open(os.path.join(scratch, "agent.log"), "w+")
    worker = 'touch "$DDPRUN_HEARTBEAT_FILE"; exec sleep 600'
    agent = subprocess.Popen(
        [args.ddprun, "--standalone", "--nproc-per-node", str(args.nproc), "--hang-timeout", "600",
         "--no-python", "sh", "-c", worker],
        env=dict(os.environ, TORCHELASTIC_HEALTH_CHECK_PORT="0", LOGLEVEL="INFO"),
        stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
    try:
        port = None
        end = time.monotonic() + 60
        while port is None and time.monotonic() < end:
            log.seek(0)
            for line in log:
                if "serving /healthz on http://" in line:
                    port = int(line.split("http://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])
            time.sleep(0.1)
        if port is None:
            sys.exit("bench_metrics: the agent never said where /healthz is")
        # Every rank has reported once: the page carries N heartbeat ages.
        end = time.monotonic() + 120
        while time.monotonic() < end:
            _, status, _ = request(port, "/metrics")
            page = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            page.request("GET", "/metrics")
            text = page.getresponse().read().decode()
            page.close()
            if text.count("ddprun_worker_heartbeat_age_seconds{") == args.nproc:
                break
            time.sleep(0.2)
        else:
            sys.exit("bench_metrics: not every rank reported within 120 s")

        idle_seconds = 2.0
        before = cpu_seconds(agent.pid)
        time.sleep(idle_seconds)
        idle_rate = (cpu_seconds(agent.pid) - before) / idle_seconds

        rows = []
        for path in ("/metrics", "/healthz", "/nothing"):
            times = []
            size = 0
            started = time.perf_counter()
            before = cpu_seconds(agent.pid)
            for _ in range(args.scrapes):
                seconds, status, size = request(port, path)
                times.append(seconds)
            cpu = cpu_seconds(agent.pid) - before - idle_rate * (time.perf_counter() - started)
            times.sort()
            rows.append((path, size, statistics.median(times), times[int(len(times) * 0.99) - 1],
                         max(0.0, cpu) / args.scrapes))
        floor = rows[-1][4]
        print(f"### /metrics with {args.nproc} ranks: {args.scrapes} requests per path, each on its own "
              f"connection\n")
        print("| path | body | client time per request, median | p99 | agent CPU per request | vs the 404 floor |")
        print("|---|---|---|---|---|---|")
        for path, size, median, p99, cpu in rows:
            ratio = f"{cpu / floor:.2f}x" if floor > 0 else "-"
            print(f"| {path} | {size:,} B | {median * 1000:.3f} ms | {p99 * 1000:.3f} ms | {cpu * 1e6:.0f} us | {ratio} |")
    finally:
        os.killpg(agent.pid, 15)
        try:
            agent.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(agent.pid, 9)
            agent.wait()
        log.close()
        subprocess.run(["rm", "-rf", scratch])


if __name__ == "__main__":
    main()
