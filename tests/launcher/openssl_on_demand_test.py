#!/usr/bin/env python3
"""OpenSSL on demand (rendezvous/src/auth/tls_openssl_on_demand.cc): ddprun maps libssl and
libcrypto only when a job uses a token or TLS.

  openssl_on_demand_test.py --ddprun BIN --scenario plain|tls|missing

plain    ddprun's ELF records neither libssl nor libcrypto as needed, and the agent of a one-node
         job with no token maps neither while its workers run (a function ddprun newly calls that
         is missing from the on-demand list would bring them back at start-up: this says which).
tls      a one-node job with a token and TLS on the store its agent hosts: the store answers a TLS
         handshake (Python's ssl, trusting the job's certificate), the agent has loaded libssl, the
         workers run and the job exits 0.
missing  the same job where libssl.so.3 cannot be loaded (/dev/null bound over it in a private
         mount namespace: root or an unprivileged user namespace, else exit 77): exit 2 with one
         line naming OpenSSL and the fix, no worker started.

Every wait is bounded by one deadline well below CTest's TIMEOUT.
"""
import argparse
import ctypes
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "security"))
from secjobs import SKIP, Deadline, Job, free_port, give_up, write_certificate, write_token  # noqa: E402

OPENSSL = ("libssl.so", "libcrypto.so")
POLL = 0.05


def mapped_openssl(pid):
    """The OpenSSL libraries process `pid` maps (paths), or None once it is gone."""
    try:
        with open("/proc/%d/maps" % pid) as maps:
            return sorted({line.split()[-1] for line in maps
                           if any(name in line.rsplit("/", 1)[-1] for name in OPENSSL)})
    except (FileNotFoundError, ProcessLookupError):
        return None


def needed(binary):
    """The NEEDED entries of `binary`'s dynamic section (readelf -d)."""
    text = subprocess.run(["readelf", "-d", binary], capture_output=True, text=True, timeout=30,
                          check=True).stdout
    return [line.split("[", 1)[1].rstrip("]") for line in text.splitlines() if "(NEEDED)" in line]


def one_node_job(args, port, conf, worker):
    items = ["--rdzv-conf", ",".join(conf)] if conf else []
    argv = [args.ddprun, "--nnodes", "1", "--nproc-per-node", "2", "--rdzv-backend", "c10d",
            "--rdzv-endpoint", "127.0.0.1:%d" % port, "--rdzv-id", "ondemand-%d" % os.getpid(),
            *items, "--no-python", *worker]
    return argv


def while_workers_run(job, deadline, what):
    """Waits until the agent has started its workers (a child that is not the guardian runs
    `sleep`), then returns the OpenSSL libraries the agent maps."""
    while deadline.left() > 0:
        children = []
        try:
            with open("/proc/%d/task/%d/children" % (job.pid, job.pid)) as f:
                children = [int(p) for p in f.read().split()]
        except FileNotFoundError:
            give_up("%s: the agent ended before its workers ran" % what, [job])
        for child in children:
            try:
                with open("/proc/%d/cmdline" % child, "rb") as f:
                    if f.read().split(b"\0")[0].endswith(b"sleep"):
                        return mapped_openssl(job.pid)
            except FileNotFoundError:
                continue
        time.sleep(POLL)
    give_up("%s: no worker running within the deadline" % what, [job])


def finish(job, deadline, what):
    code = job.wait(deadline.cap(60))
    if code != 0:
        give_up("%s: exited %s, not 0" % (what, code), [job])


def plain(args, deadline, work):
    found = [n for n in needed(args.ddprun) if n.startswith(OPENSSL)]
    if found:
        give_up("ddprun records %s as needed: a function it now calls is missing from "
                "DDPRUN_OPENSSL_FUNCTIONS in rendezvous/src/auth/tls_openssl_on_demand.cc "
                "(nm -D --undefined-only of a build without it says which)" % found, [])
    job = Job(one_node_job(args, free_port(), [], ["sleep", "1"]), name="ddprun, no token")
    mapped = while_workers_run(job, deadline, "a job without a token")
    if mapped:
        job.kill()
        give_up("the agent of a job without a token maps %s" % mapped, [job])
    finish(job, deadline, "a job without a token")
    return "not needed by the ELF, not mapped by the agent while its workers ran"


def tls(args, deadline, work):
    certificate, key = write_certificate(work)
    port = free_port()
    conf = ["token_file=" + write_token(work), "tls_cert=" + certificate, "tls_key=" + key]
    job = Job(one_node_job(args, port, conf, ["sleep", "2"]), name="ddprun, token and TLS")
    mapped = while_workers_run(job, deadline, "a job with a token and TLS")
    if not mapped or not any("libssl.so" in path for path in mapped):
        job.kill()
        give_up("the agent of a job with TLS maps no libssl (%s)" % mapped, [job])
    context = ssl.create_default_context(cafile=certificate)
    context.check_hostname = False  # ddprun checks the signature, not the name (docs/security.md)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            with context.wrap_socket(raw) as stream:
                version = stream.version()
    except (OSError, ssl.SSLError) as error:
        job.kill()
        give_up("no TLS handshake with the agent's store: %s" % error, [job])
    finish(job, deadline, "a job with a token and TLS")
    return "%s with the agent's store, the agent maps %s, exit 0" % (
        version, ", ".join(os.path.basename(p) for p in mapped))


def libssl_path():
    """Where this system's libssl.so.3 is (the file the loader would open)."""
    ctypes.CDLL("libssl.so.3")
    with open("/proc/self/maps") as maps:
        for line in maps:
            if "libssl.so.3" in line:
                return os.path.realpath(line.split()[-1])
    raise RuntimeError("libssl.so.3 loaded but not in /proc/self/maps")


def missing(args, deadline, work):
    private = ["unshare", "--mount", "--propagation", "private"]
    if os.geteuid() != 0:
        private = ["unshare", "--user", "--map-root-user", "--mount"]
    target = libssl_path()
    probe = subprocess.run(private + ["mount", "--bind", "/dev/null", target],
                           capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        print("SKIP: cannot hide %s in a private mount namespace (%s)" % (target, probe.stderr.strip()))
        return None
    argv = one_node_job(args, free_port(), ["token_file=" + write_token(work)],
                        ["echo", "worker ran"])
    job = Job(private + ["sh", "-c", 'mount --bind /dev/null "$0" && exec "$@"', target] + argv,
              name="ddprun without a loadable libssl", env=dict(os.environ, OMP_NUM_THREADS="1"))
    code = job.wait(deadline.cap(30))
    lines = [line for line in job.errors.splitlines() if line.strip()]
    if code != 2 or len(lines) != 1:
        give_up("exited %s with %d stderr lines, not 2 with one line" % (code, len(lines)), [job])
    for word in ("OpenSSL", "could not be loaded", "libssl3"):
        if word not in lines[0]:
            give_up("the line %r does not say %r" % (lines[0], word), [job])
    if "worker ran" in job.output:
        give_up("a worker was started", [job])
    return "exit 2: " + lines[0]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ddprun", required=True)
    parser.add_argument("--scenario", required=True, choices=["plain", "tls", "missing"])
    parser.add_argument("--timeout", type=float, default=100)  # CTest's TIMEOUT is 150
    args = parser.parse_args()
    deadline = Deadline(args.timeout)
    work = tempfile.mkdtemp(prefix="ddprun-openssl-")
    started = time.monotonic()
    try:
        verdict = {"plain": plain, "tls": tls, "missing": missing}[args.scenario](args, deadline, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if verdict is None:
        return SKIP
    print("RESULT %s: %s (%.1f s)" % (args.scenario, verdict, time.monotonic() - started))
    return 0


if __name__ == "__main__":
    sys.exit(main())
