#!/usr/bin/env python3
"""An outsider's flood against a /healthz port, and the probe that must still be answered.

  health_flood.py flood HOST PORT --idle N --slowloris N [--seconds S]
  health_flood.py probe HOST PORT --count N --within SECONDS [--host HOSTHEADER] [--every S]

flood   holds N idle connections (a partial request line, then silence) and N slowloris ones
        (a partial request, then one more header byte every 100 ms), each re-opened as soon as
        the server drops it, for S seconds (a hang guard: the test ends it sooner). Raises its
        RLIMIT_NOFILE to hold them. Prints "holding N" once each of the N has been connected,
        then once a second "open N reopened M" (N: connected now; M: dropped by the server and
        opened again so far).
probe   N probes, one connection each, as a kubelet makes them (GET /healthz, HTTP/1.1, the
        Host header, a timeout of SECONDS for connect, request and answer together). Prints
        each probe that was not a 200 within SECONDS, then one line with the count answered in
        time and the latencies (median, p99, max); exits 0 only when all N were.
"""
import argparse
import errno
import resource
import selectors
import signal
import socket
import statistics
import struct
import sys
import time

IDLE_BYTES = b"GET /heal"
SLOW_START = b"GET /healthz HTTP/1.1\r\n"
TRICKLE_EVERY = 0.1
CONNECT_TIMEOUT = 5.0  # a connect the server's backlog never completes is tried again


def raise_fd_limit(needed):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        want = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        soft = want
    if soft != resource.RLIM_INFINITY and soft < needed:
        sys.exit(f"flood: RLIMIT_NOFILE allows {soft} descriptors, {needed} are needed; raise the hard limit")


class Flood:
    def __init__(self, host, port, idle, slow):
        self.address = (host, port)
        self.selector = selectors.DefaultSelector()
        self.kinds = ["idle"] * idle + ["slow"] * slow
        self.sockets = {}  # slot -> (socket, connected, since)
        self.reopened = 0
        self.ever = set()  # the slots connected at least once
        for slot in range(len(self.kinds)):
            self.open(slot)

    def open(self, slot):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        sock.connect_ex(self.address)
        self.sockets[slot] = (sock, False, time.monotonic())
        self.selector.register(sock, selectors.EVENT_WRITE, slot)

    def reopen(self, slot):
        sock = self.sockets[slot][0]
        self.selector.unregister(sock)
        # Closed with a reset, which leaves no TIME_WAIT on the server: a 4-tuple the server holds
        # in TIME_WAIT delays the next connect from that port by a SYN retransmission (1 s).
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
        self.reopened += 1
        self.open(slot)

    def connected(self):
        return sum(1 for _, up, _ in self.sockets.values() if up)

    def step(self, timeout):
        for key, events in self.selector.select(timeout):
            slot = key.data
            sock, up, _ = self.sockets[slot]
            if not up:
                if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) != 0:
                    self.reopen(slot)
                    continue
                try:
                    sock.send(IDLE_BYTES if self.kinds[slot] == "idle" else SLOW_START)
                except OSError:
                    self.reopen(slot)
                    continue
                self.sockets[slot] = (sock, True, time.monotonic())
                self.ever.add(slot)
                self.selector.modify(sock, selectors.EVENT_READ, slot)
            else:
                # Readable: the server closed it (or answered, which it must not before the end).
                try:
                    data = sock.recv(4096)
                except OSError:
                    data = b""
                if not data:
                    self.reopen(slot)

    def trickle(self):
        now = time.monotonic()
        for slot, (sock, up, since) in list(self.sockets.items()):
            if self.kinds[slot] == "slow" and up and now - since >= TRICKLE_EVERY:
                try:
                    sock.send(b"X")
                    self.sockets[slot] = (sock, True, now)
                except OSError as error:
                    if error.errno not in (errno.EAGAIN, errno.EWOULDBLOCK):
                        self.reopen(slot)
            elif not up and now - since >= CONNECT_TIMEOUT:
                self.reopen(slot)


def flood(args):
    total = args.idle + args.slowloris
    raise_fd_limit(total + 64)
    end = time.monotonic() + args.seconds
    attack = Flood(args.host, args.port, args.idle, args.slowloris)
    held = False
    next_report = time.monotonic() + 1
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # the test's stop: say what was done
    try:
        while time.monotonic() < end:
            attack.step(0.02)
            attack.trickle()
            if not held and len(attack.ever) == total:
                held = True
                print(f"holding {total}", flush=True)
            if time.monotonic() >= next_report:
                next_report += 1
                print(f"open {attack.connected()} reopened {attack.reopened}", flush=True)
    finally:
        print(f"flood ends: open {attack.connected()} reopened {attack.reopened}", flush=True)


def probe_once(host, port, header, within):
    """(status line or what went wrong, seconds)."""
    start = time.monotonic()
    request = f"GET /healthz HTTP/1.1\r\nHost: {header}\r\nUser-Agent: kube-probe/1.28\r\n" \
              f"Accept: */*\r\nConnection: close\r\n\r\n".encode()
    try:
        with socket.create_connection((host, port), timeout=within) as sock:
            sock.settimeout(max(0.001, within - (time.monotonic() - start)))
            sock.sendall(request)
            answer = b""
            while b"\r\n" not in answer:
                sock.settimeout(max(0.001, within - (time.monotonic() - start)))
                chunk = sock.recv(4096)
                if not chunk:
                    break
                answer += chunk
        line = answer.split(b"\r\n", 1)[0].decode(errors="replace")
        return (line or "closed without an answer"), time.monotonic() - start
    except socket.timeout:
        return "no answer in time", time.monotonic() - start
    except OSError as error:
        return f"{type(error).__name__}: {error}", time.monotonic() - start


def probe(args):
    header = args.host_header or f"{args.host}:{args.port}"
    times = []
    failures = []
    for i in range(args.count):
        line, seconds = probe_once(args.host, args.port, header, args.within)
        times.append(seconds)
        if not line.startswith("HTTP/1.1 200") or seconds >= args.within:
            failures.append((i, line, seconds))
            print(f"probe {i}: {line} after {seconds * 1000:.0f} ms", flush=True)
        time.sleep(args.every)
    ordered = sorted(times)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    print(f"probes: {args.count - len(failures)} of {args.count} answered 200 within {args.within} s; "
          f"median {statistics.median(times) * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, "
          f"max {ordered[-1] * 1000:.1f} ms", flush=True)
    return 0 if not failures else 1


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["flood", "probe"])
    parser.add_argument("host")
    parser.add_argument("port", type=int)
    parser.add_argument("--idle", type=int, default=500)
    parser.add_argument("--slowloris", type=int, default=500)
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--within", type=float, default=1.0)
    parser.add_argument("--every", type=float, default=0.05)
    parser.add_argument("--host-header", dest="host_header")
    args = parser.parse_args()
    if args.mode == "flood":
        flood(args)
        return 0
    return probe(args)


if __name__ == "__main__":
    sys.exit(main())
