#!/usr/bin/env python3
"""Waiting says what it waits for (issue #21, points 2 and 5), with real agents and processes.

    late_dns_test.py --ddprun BIN --scenario NAME

  late-dns-c10d    Kubeflow PyTorchJob, elastic: two pods with nothing but the PET_* variables
                   the operator sets (PET_RDZV_ENDPOINT=late-master.test:PORT, c10d). The store's
                   pod resolves its own name from the start (kubelet writes it into the pod's
                   /etc/hosts); the other pod's resolver learns it ~3 s late, as a headless
                   service's name appears. Each agent runs in a mount namespace of its own whose
                   /etc/hosts is a file of the test's (bind-mounted; edited in place later). The
                   late pod says "name not resolved yet", then the job forms: 2 workers, exit 0.
  late-dns-static  Trainer v2: PET_MASTER_ADDR=late-master.test, PET_NODE_RANK, static backend;
                   the name resolves on neither pod for ~3 s: node rank 0 listens on every
                   interface (as torchrun's store does) and says so, node rank 1 waits, saying so.
  pytorchjob-master-localhost
                   A PyTorchJob with a Master replica: training-operator writes
                   PET_MASTER_ADDR=localhost into the master pod and the master's address into the
                   worker pod; the master's store listens on every interface (as torchrun's does),
                   so the worker reaches it through this host's network address (skipped, 77,
                   where the host has none but loopback).
  late-node        A 2-node job whose second node starts 12 s late: the first says "waiting for 1
                   more node (1 of 2 joined: HOST)" with the time left, and in the exit barrier
                   (the second node's worker takes 3 s longer) "waiting for node HOST (group rank
                   1) to finish, N s left".

The late-dns scenarios need root and unshare (a mount namespace); they are skipped (77) where one
cannot be made. Every wait is bounded and prints what it saw when it gives up.
"""
import os
import shutil
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from side_by_side import SKIP, fail, run, scenario_main  # noqa: E402
from ports import free_port  # noqa: E402

NAME = "late-master.test"
# Each worker: who it is in the world; the second group's worker finishes later (late-node).
WORKER = ('echo "rank=$RANK world=$WORLD_SIZE group=$GROUP_RANK"; '
          'if [ "$GROUP_RANK" = 1 ]; then sleep "${LATE_FINISH:-0}"; fi')
JOB_TIMEOUT = 90  # far beyond the ~15 s a scenario takes; well below the CTest TIMEOUT


def need_mount_namespace(work):
    if shutil.which("unshare") is None or os.geteuid() != 0:
        print("SKIP: a late DNS name needs root and unshare (a mount namespace over /etc/hosts)")
        sys.exit(SKIP)
    hosts = os.path.join(work, "probe-hosts")
    with open(hosts, "w") as f:
        f.write("127.0.0.1 localhost\n")
    probe = run(["unshare", "-m", "sh", "-c", f"mount --bind {hosts} /etc/hosts"], dict(os.environ),
                work, timeout=30)
    if probe.returncode != 0:
        print(f"SKIP: cannot bind a file over /etc/hosts in a mount namespace: {probe.stderr.strip()}")
        sys.exit(SKIP)


def hosts_file(work, name, knows_name):
    path = os.path.join(work, name)
    with open("/etc/hosts") as f:
        base = f.read()
    with open(path, "w") as f:
        f.write(base if base.endswith("\n") else base + "\n")
        if knows_name:
            f.write(f"127.0.0.1 {NAME}\n")
    return path


def learn_name(path):
    """The name appears: appended in place, so the bind mount (the same inode) shows it."""
    with open(path, "a") as f:
        f.write(f"127.0.0.1 {NAME}\n")


def pod(args, work, hosts, pet):
    """An agent started as a pod's container command: `ddprun --no-python sh -c WORKER`, its
    rendezvous from the PET_* variables alone, /etc/hosts being `hosts`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PET_")}
    env.update(pet)
    env["PET_NPROC_PER_NODE"] = "1"
    script = f'mount --bind {hosts} /etc/hosts && exec "$0" --no-python /bin/sh -c "$1"'
    return subprocess.Popen(["unshare", "-m", "sh", "-c", script, args.ddprun, WORKER], env=env,
                            cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(procs, timeout=JOB_TIMEOUT):
    """Each process's (exit code, stdout, stderr); kills them all and fails after `timeout` s."""
    deadline = time.monotonic() + timeout
    results = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=max(1, deadline - time.monotonic()))
            results.append((proc.returncode, out, err))
        except subprocess.TimeoutExpired:
            for other in procs:
                other.kill()
            seen = [other.communicate() for other in procs]
            fail(f"the agents did not finish within {timeout} s; output so far:\n" +
                 "\n".join(f"--- agent {i}\n{o}\n{e}" for i, (o, e) in enumerate(seen)))
    return results


def shown(results):
    return "\n".join(f"--- agent {i}: exit {code}\n--- stdout\n{out}\n--- stderr\n{err}"
                     for i, (code, out, err) in enumerate(results))


def expect(condition, message, results):
    if not condition:
        fail(f"{message}\n{shown(results)}")


def formed_once(results, nodes):
    ranks = sorted(line.split()[0] for _, out, _ in results for line in out.splitlines()
                   if line.startswith("rank=") and f"world={nodes}" in line)
    expect(ranks == [f"rank={r}" for r in range(nodes)], f"not one world of {nodes} workers", results)
    expect(all(code == 0 for code, _, _ in results), "not every agent exited 0", results)


def late_dns_c10d(args, work):
    need_mount_namespace(work)
    pet = {"PET_RDZV_ENDPOINT": f"{NAME}:{free_port()}", "PET_RDZV_BACKEND": "c10d",
           "PET_NNODES": "2", "PET_RDZV_ID": "late-dns", "PET_MAX_RESTARTS": "0"}
    late_hosts = hosts_file(work, "late-hosts", knows_name=False)
    store_pod = pod(args, work, hosts_file(work, "own-hosts", knows_name=True), pet)
    late_pod = pod(args, work, late_hosts, pet)
    time.sleep(3)
    learn_name(late_hosts)
    results = finish([store_pod, late_pod])
    formed_once(results, 2)
    late_err = results[1][2]
    expect(f"'{NAME}' in PET_RDZV_ENDPOINT does not resolve yet" in late_err,
           "the late pod did not say up front that the name does not resolve yet", results)
    expect(f"waiting for the rendezvous store at {NAME}:" in late_err and "name not resolved yet" in late_err,
           "the late pod did not say it waits for the name", results)
    print("c10d: the late pod waited for the store's name and the job formed once it resolved")


def late_dns_static(args, work):
    need_mount_namespace(work)
    port = free_port()
    hosts = [hosts_file(work, f"hosts-{rank}", knows_name=False) for rank in range(2)]
    pods = [pod(args, work, hosts[rank], {"PET_NNODES": "2", "PET_NODE_RANK": str(rank),
                                         "PET_MASTER_ADDR": NAME, "PET_MASTER_PORT": str(port)})
            for rank in range(2)]
    time.sleep(3)
    for path in hosts:
        learn_name(path)
    results = finish(pods)
    formed_once(results, 2)
    expect("does not resolve here yet: listening on all interfaces" in results[0][2],
           "node rank 0 did not say it listens on every interface", results)
    expect("name not resolved yet" in results[1][2], "node rank 1 did not say it waits for the name",
           results)
    print("static: node rank 0 listened everywhere, node rank 1 waited for the name, the job formed")


def network_address():
    """This host's first non-loopback IPv4 address, or None."""
    done = subprocess.run(["hostname", "-I"], capture_output=True, text=True, timeout=10)
    for word in done.stdout.split():
        if "." in word and not word.startswith("127."):
            return word
    return None


def pytorchjob_master_localhost(args, work):
    address = network_address()
    if address is None:
        print("SKIP: this host has no network address but loopback")
        sys.exit(SKIP)
    port = str(free_port())
    env = {k: v for k, v in os.environ.items() if not k.startswith("PET_")}
    # Bounded: the static rendezvous' `timeout` instead of its 900 s.
    common = {"PYTHONUNBUFFERED": "0", "MASTER_PORT": port, "WORLD_SIZE": "2",
              "PET_MASTER_PORT": port, "PET_NNODES": "2", "PET_NPROC_PER_NODE": "1",
              "PET_RDZV_CONF": "timeout=30"}
    master = dict(env, **common, MASTER_ADDR="localhost", PET_MASTER_ADDR="localhost", RANK="0",
                  PET_NODE_RANK="0")
    worker = dict(env, **common, MASTER_ADDR=address, PET_MASTER_ADDR=address, RANK="1",
                  PET_NODE_RANK="1")
    procs = [subprocess.Popen([args.ddprun, "--no-python", "/bin/sh", "-c", WORKER], env=pod_env,
                              cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for pod_env in (master, worker)]
    results = finish(procs)
    formed_once(results, 2)
    expect("listening on all interfaces" in results[0][2],
           "the master pod did not say it listens on every interface", results)
    print(f"PyTorchJob: the worker pod reached the master pod's store (MASTER_ADDR=localhost) at {address}")


def late_node(args, work):
    endpoint = f"127.0.0.1:{free_port()}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PET_")}
    env["LATE_FINISH"] = "3"

    def agent():
        return subprocess.Popen([args.ddprun, "--nnodes", "2", "--nproc-per-node", "1",
                                 "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint,
                                 "--rdzv-id", "late-node", "--no-python", "/bin/sh", "-c", WORKER],
                                env=env, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)

    first = agent()
    time.sleep(12)
    second = agent()
    results = finish([first, second])
    formed_once(results, 2)
    first_err = results[0][2]
    host = socket.gethostname()
    waits = [line for line in first_err.splitlines() if "waiting for 1 more node" in line]
    expect(waits and f"(1 of 2 joined: {host})" in waits[0] and "s left of the join timeout" in waits[0],
           "the first node did not say which node it waits for", results)
    # One line when the wait starts, then one per 10 s: 12 s of waiting is 2 lines, never a flood.
    expect(len(waits) <= 3, f"{len(waits)} waiting lines in 12 s", results)
    expect(any(f"waiting for node {host} (group rank 1) to finish" in line and " s left" in line
               for line in first_err.splitlines()),
           "the first node did not name the node it waits for in the exit barrier", results)
    print(f"late node: {len(waits)} waiting line(s) over 12 s; the exit barrier named the node at work")


if __name__ == "__main__":
    scenario_main(__doc__, {"late-dns-c10d": late_dns_c10d, "late-dns-static": late_dns_static,
                            "pytorchjob-master-localhost": pytorchjob_master_localhost,
                            "late-node": late_node}, prefix="ddprun-late-dns-test-")
