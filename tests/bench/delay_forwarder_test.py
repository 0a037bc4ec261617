#!/usr/bin/python3
"""The relay-delay benchmark's link (ddprun-delay-forwarder) does what its figures rely on: every
packet waits the delay, the TCP handshake's included, and a mebibyte crosses it whole and in order.

Two network namespaces joined by the forwarder with a 25 ms one-way delay; an echo server in one, a
client in the other. Only lower bounds on time are asserted (a round trip is at least 2 x 25 ms),
so a slow machine cannot fail it. Needs root and `ip netns`: exits 77 (skipped) otherwise.

Usage: delay_forwarder_test.py path/to/ddprun-delay-forwarder
"""
import os
import socket
import subprocess
import sys
import time

DELAY_MS = 25
NODE, STORE = "10.253.0.1", "10.253.0.2"
PORT = 5599  # inside a namespace of this test's own: nothing else listens there

ECHO = """
import socket, sys
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("0.0.0.0", %d))
listener.listen()
print("listening", flush=True)
listener.settimeout(30)
connection, _ = listener.accept()
connection.settimeout(30)
connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
while True:
    data = connection.recv(65536)
    if not data:
        break
    connection.sendall(data)
""" % PORT

CLIENT = """
import os, socket, time
t0 = time.monotonic()
client = socket.create_connection((%r, %d), timeout=10)
connect_ms = (time.monotonic() - t0) * 1000
client.settimeout(10)
client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
rtts = []
for _ in range(3):
    t0 = time.monotonic()
    client.sendall(b"ping")
    assert client.recv(16) == b"ping"
    rtts.append((time.monotonic() - t0) * 1000)
payload = os.urandom(1 << 20)
client.sendall(payload)
echoed = bytearray()
while len(echoed) < len(payload):
    chunk = client.recv(65536)
    if not chunk:
        break
    echoed += chunk
print(f"{connect_ms:.1f} {min(rtts):.1f} {int(bytes(echoed) == payload)} {len(echoed)}")
""" % (STORE, PORT)


def ip(*args):
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


def main():
    forwarder = sys.argv[1]
    tag = f"ddpfw{os.getpid()}"
    node, store = f"{tag}n", f"{tag}s"
    if os.geteuid() != 0 or subprocess.run(["ip", "netns", "add", node], capture_output=True,
                                           timeout=30).returncode != 0:
        print("skipped: needs root and network namespaces (ip netns add)")
        return 77
    made = [node]
    jobs = []
    try:
        ip("netns", "add", store)
        made.append(store)
        link = subprocess.Popen([forwarder, node, store, str(DELAY_MS * 1000)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        jobs.append(link)
        ready = link.stdout.readline().strip()  # the forwarder prints it or exits at once
        if ready != "ready":
            print(f"FAIL: the forwarder did not start: {ready!r} {link.stderr.read()!r}")
            return 1
        for ns, mine, peer in ((node, NODE, STORE), (store, STORE, NODE)):
            ip("-n", ns, "link", "set", "lo", "up")
            ip("-n", ns, "addr", "add", mine, "peer", peer, "dev", "dly0")
            ip("-n", ns, "link", "set", "dly0", "up")
        echo = subprocess.Popen(["ip", "netns", "exec", store, sys.executable, "-c", ECHO],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        jobs.append(echo)
        if echo.stdout.readline().strip() != "listening":
            print(f"FAIL: the echo server did not start: {echo.stderr.read()!r}")
            return 1
        out = subprocess.run(["ip", "netns", "exec", node, sys.executable, "-c", CLIENT],
                             capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            print(f"FAIL: the client failed: {out.stderr.strip()}")
            return 1
        connect_ms, rtt_ms, intact, received = out.stdout.split()
        print(f"connect {connect_ms} ms, round trip {rtt_ms} ms (delay {DELAY_MS} ms each way), "
              f"1 MiB echoed: {received} bytes, intact: {intact == '1'}")
        failures = []
        if float(connect_ms) < 2 * DELAY_MS:
            failures.append(f"connect took {connect_ms} ms: the SYN and SYN-ACK were not delayed")
        if float(rtt_ms) < 2 * DELAY_MS:
            failures.append(f"a round trip took {rtt_ms} ms, under 2 x {DELAY_MS} ms")
        if intact != "1":
            failures.append(f"the echoed mebibyte differs ({received} bytes came back)")
        for failure in failures:
            print("FAIL: " + failure)
        return 1 if failures else 0
    finally:
        for job in reversed(jobs):
            job.kill()
            job.wait(timeout=10)
        for ns in reversed(made):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


if __name__ == "__main__":
    start = time.monotonic()
    code = main()
    print(f"({time.monotonic() - start:.1f} s)")
    sys.exit(code)
