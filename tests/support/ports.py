"""Ports for the Python tests: one copy of the rule for picking a port to tell processes before
anyone listens on it.

A port the kernel picks for bind(0) comes from its ephemeral range, the range every outgoing
connection takes its local port from: between the test's check and the launcher's bind, any
connection of a test running beside it (CTest -j2) can take it, and the launcher then finds its
endpoint "in use" and waits for a store nobody serves (seen in CI: a c10d job's two agents both
became clients). Ports outside that range are taken only by listeners that ask for them."""

import contextlib
import errno
import os
import random
import socket
import time

# torch 1.13 --standalone always binds localhost:29400: never handed out.
TORCH113_STANDALONE_PORT = 29400

# Ports handed out lately, one empty file each, shared with tests/support/ports.h: two tests
# beside each other (CTest -j2) once drew the same port, and a c10d job's two agents both found
# it taken and waited for a store nobody served. A claim lapses after CLAIM_S.
CLAIMS = "/tmp/ddprun-test-ports"
CLAIM_S = 600


def claim(port):
    """Whether `port` is now this test's: no other test claimed it within CLAIM_S. Where the
    directory cannot be used (another user's), every port counts as claimed, as before."""
    try:
        os.mkdir(CLAIMS, 0o700)
    except FileExistsError:
        info = os.lstat(CLAIMS)
        if not os.path.isdir(CLAIMS) or os.path.islink(CLAIMS) or info.st_uid != os.geteuid():
            return True  # not ours to write into
    except OSError:
        return True
    path = os.path.join(CLAIMS, str(port))
    for _ in range(2):
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o600))
            return True
        except FileExistsError:
            try:
                if time.time() - os.lstat(path).st_mtime < CLAIM_S:
                    return False
                os.unlink(path)  # a lapsed claim
            except FileNotFoundError:
                pass
        except OSError:
            return True
    return False


def bindable(port):
    """Whether a listener could bind `port` on every address now."""
    for family, host in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        try:
            s = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue  # no IPv6
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, port))
        except OSError as e:
            if e.errno == errno.EADDRNOTAVAIL:
                continue
            return False
        finally:
            s.close()
    return True


def ephemeral_range():
    lo, hi = 32768, 60999
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = (int(x) for x in f.read().split())
    return lo, hi


def free_port(taken=()):
    """A TCP port free now on every address, outside the kernel's ephemeral range and `taken`."""
    lo, hi = ephemeral_range()
    first, last = (20000, lo - 1) if lo > 21000 else (hi + 1, 65000)
    for _ in range(500):
        port = random.randint(first, last)
        if port not in taken and port != TORCH113_STANDALONE_PORT and bindable(port) and claim(port):
            return port
    raise RuntimeError("no free port in %d-%d" % (first, last))
