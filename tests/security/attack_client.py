#!/usr/bin/env python3
"""A bare c10d TCPStore client in pure Python (no torch): what an attacker who can reach a store's
port can do without any credential. torch 2.x dialect: VALIDATE + PING at connect, as torch 2.5+
does (the bytes: rendezvous/src/protocol/wire.h and /work/shared/reference/tcpstore-protocol.md
section 3), plus ddprun's HOLD/RELEASE extension ops.

Keys are the raw wire keys: nothing is put in front of them (torch's client adds "/", ddprun's
agents' keys are "/ddprun/<run id>/..." on the wire). Every receive is bounded by the client's
timeout; a store that closes the connection raises StoreClosed, whose text says "closed without
reply" when not one reply byte ever came (what a token-protected store must do to this client).

    from attack_client import AttackClient, StoreClosed, probe
    with AttackClient("127.0.0.1", port) as store:
        keys = store.list_keys()

Also a command, for poking at a store by hand:
    attack_client.py HOST PORT probe|list-keys|get KEY|set KEY VALUE|...
"""
import os
import socket
import struct
import sys
import time

MAGIC = 0x3C85F7CE  # torch 2.x VALIDATE magic

# torch 2.x QueryType numbering (append-only since VALIDATE became 0), and ddprun's extensions.
VALIDATE, SET, COMPARE_SET, GET, ADD, CHECK, WAIT, NUM_KEYS, DELETE_KEY, APPEND, MULTI_GET, \
    MULTI_SET, CANCEL_WAIT, PING = range(14)
LIST_KEYS = 17
HOLD, RELEASE = 0xD0, 0xD1

STOP_WAITING, WAIT_CANCELED = 0, 1


class StoreClosed(ConnectionError):
    """The store closed (or reset) the connection. `received`: reply bytes it ever sent on it."""

    def __init__(self, what, received):
        self.received = received
        if received == 0:
            text = "%s: closed without reply (0 bytes ever received)" % what
        else:
            text = "%s: closed after %d reply bytes" % (what, received)
        super().__init__(text)


class StoreTimeout(TimeoutError):
    """No (complete) reply within the timeout, the connection still open."""


def _bytes(value):
    return value.encode() if isinstance(value, str) else bytes(value)


def _blob(value):
    value = _bytes(value)
    return struct.pack("<Q", len(value)) + value


def _keys(keys):
    return struct.pack("<Q", len(keys)) + b"".join(_blob(k) for k in keys)


class AttackClient:
    """One connection to a TCPStore. `handshake`: send VALIDATE + PING at once, as torch 2.x does
    (False: connect only, to send something else first)."""

    def __init__(self, host, port, timeout=5.0, handshake=True):
        self.timeout = timeout
        self.received = 0  # reply bytes received on this connection, ever
        self.where = "%s:%d" % (host, port)
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if handshake:
            self.handshake()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self.sock.close()

    # --- framing -------------------------------------------------------------------------------
    def send(self, data):
        try:
            self.sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError) as error:
            raise StoreClosed("%s: sending (%s)" % (self.where, error), self.received) from None

    def recv_exact(self, n, timeout=None):
        """Exactly n bytes, within `timeout` (the client's by default) for all of them."""
        end = time.monotonic() + (self.timeout if timeout is None else timeout)
        data = b""
        while len(data) < n:
            left = end - time.monotonic()
            if left <= 0:
                raise StoreTimeout("%s: %d of %d reply bytes within %.1f s" %
                                   (self.where, len(data), n, self.timeout if timeout is None else timeout))
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(n - len(data))
            except socket.timeout:
                continue
            except ConnectionResetError:
                raise StoreClosed("%s: reset" % self.where, self.received) from None
            if not chunk:
                raise StoreClosed(self.where, self.received)
            self.received += len(chunk)
            data += chunk
        return data

    def _u8(self):
        return self.recv_exact(1)[0]

    def _i64(self):
        return struct.unpack("<q", self.recv_exact(8))[0]

    def _blob(self):
        return self.recv_exact(struct.unpack("<Q", self.recv_exact(8))[0])

    # --- connection setup ----------------------------------------------------------------------
    def handshake(self):
        # Two sends, as torch 2.6 does; the PING's echo is the first reply byte a store gives.
        self.send(struct.pack("<BI", VALIDATE, MAGIC))
        self.ping(os.getpid() & 0xFFFFFFFF)

    def ping(self, nonce):
        self.send(struct.pack("<BI", PING, nonce))
        echoed = struct.unpack("<I", self.recv_exact(4))[0]
        if echoed != nonce:
            raise ConnectionError("%s: PING %d answered %d" % (self.where, nonce, echoed))

    # --- ops -----------------------------------------------------------------------------------
    def set(self, key, value):
        self.send(bytes([SET]) + _blob(key) + _blob(value))

    def get(self, key):
        """The value; b"" for a missing key (ddprun answers a 2.x GET of a missing key so)."""
        self.send(bytes([GET]) + _blob(key))
        return self._blob()

    def compare_set(self, key, expected, desired):
        self.send(bytes([COMPARE_SET]) + _blob(key) + _blob(expected) + _blob(desired))
        return self._blob()

    def add(self, key, delta):
        self.send(bytes([ADD]) + _blob(key) + struct.pack("<q", delta))
        return self._i64()

    def check(self, keys):
        self.send(bytes([CHECK]) + _keys(keys))
        return self._u8() == 0

    def wait(self, keys, timeout):
        """Returns once every key exists; StoreTimeout after `timeout` (the wait is cancelled, so
        the connection stays usable)."""
        self.send(bytes([WAIT]) + _keys(keys))
        try:
            reply = self.recv_exact(1, timeout)[0]
        except StoreTimeout:
            self.send(bytes([CANCEL_WAIT]))
            # A STOP_WAITING already on its way comes before the WAIT_CANCELED.
            if self._u8() == STOP_WAITING:
                self._u8()
                return
            raise StoreTimeout("%s: %s not there within %.1f s" % (self.where, keys, timeout)) from None
        if reply != STOP_WAITING:
            raise ConnectionError("%s: WAIT answered %d" % (self.where, reply))

    def num_keys(self):
        self.send(bytes([NUM_KEYS]))
        return self._i64()

    def delete_key(self, key):
        self.send(bytes([DELETE_KEY]) + _blob(key))
        return self._i64() == 1

    def multi_get(self, keys):
        self.send(bytes([MULTI_GET]) + _keys(keys))
        return [self._blob() for _ in keys]

    def multi_set(self, pairs):
        body = struct.pack("<Q", len(pairs)) + b"".join(_blob(k) + _blob(v) for k, v in pairs)
        self.send(bytes([MULTI_SET]) + body)

    def list_keys(self):
        self.send(bytes([LIST_KEYS]))
        return [self._blob() for _ in range(self._i64())]

    def hold(self, key, value, ttl_ms=0, notify_key=b"", notify_value=b""):
        """ddprun's HOLD: the value the key is held at (`value` when granted)."""
        self.send(bytes([HOLD]) + _blob(key) + _blob(value) + struct.pack("<I", ttl_ms) +
                  _blob(notify_key) + _blob(notify_value))
        return self._blob()

    def release(self, key):
        self.send(bytes([RELEASE]) + _blob(key))
        return self._i64() == 1


def probe(host, port, timeout=5.0):
    """What a store answers a torch 2.x client's opening (VALIDATE + PING) with: (reply bytes,
    how it ended). Ends: "closed" (EOF or reset: a refusal when no byte came), "answered" (bytes
    came and the connection stayed open), "silent" (neither a byte nor a close within
    `timeout`), "refused" (no listener)."""
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except ConnectionRefusedError:
        return b"", "refused"
    with sock:
        try:
            sock.sendall(struct.pack("<BI", VALIDATE, MAGIC))
            sock.sendall(struct.pack("<BI", PING, os.getpid() & 0xFFFFFFFF))
        except (BrokenPipeError, ConnectionResetError):
            return b"", "closed"
        data = b""
        end = time.monotonic() + timeout
        while True:
            # Once something came, a moment more is enough to see the whole answer.
            left = min(end - time.monotonic(), 0.5) if data else end - time.monotonic()
            if left <= 0:
                return data, "answered" if data else "silent"
            sock.settimeout(left)
            try:
                chunk = sock.recv(4096)
            except socket.timeout:
                continue
            except ConnectionResetError:
                return data, "closed"
            if not chunk:
                return data, "closed"
            data += chunk


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    host, port, command, rest = argv[0], int(argv[1]), argv[2], argv[3:]
    if command == "probe":
        data, ended = probe(host, port)
        print("%s after %d reply bytes: %s" % (ended, len(data), data.hex()))
        return 0
    with AttackClient(host, port) as store:
        if command == "list-keys":
            for key in sorted(store.list_keys()):
                print(key.decode(errors="backslashreplace"))
        elif command == "dump":
            keys = sorted(store.list_keys())
            for key, value in zip(keys, store.multi_get(keys) if keys else []):
                print("%s = %r" % (key.decode(errors="backslashreplace"), value[:200]))
        elif command == "get":
            print(store.get(rest[0]).decode(errors="backslashreplace"))
        elif command == "set":
            store.set(rest[0], rest[1])
            store.num_keys()  # SET has no reply: a round trip shows it arrived
        elif command == "cas":
            print(store.compare_set(rest[0], rest[1], rest[2]).decode(errors="backslashreplace"))
        elif command == "hold":
            print(store.hold(rest[0], rest[1]).decode(errors="backslashreplace"))
            input("holding; press Enter to let go ")
        else:
            sys.exit("unknown command %r" % command)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
