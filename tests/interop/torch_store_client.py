"""Every TCPStore operation of the running torch, as a PyTorch user calls it, against the store at
127.0.0.1:PORT (a ddprun-rendezvous daemon). Works with torch 1.13 and 2.x.

Usage: python3 torch_store_client.py PORT
Exits 0 when every check holds; prints what it checked.
"""
import datetime
import os
import sys
import threading
import time

import torch
import torch.distributed as dist

PORT = int(sys.argv[1])
MAJOR = int(torch.__version__.split(".")[0])
checked = []


# A TCPStore created directly on a torch 2.x built without libuv (Debian's) must say so.
EXTRA = {"use_libuv": False} if MAJOR >= 2 and os.environ.get("USE_LIBUV") == "0" else {}


def client(timeout=10, world_size=None):
    return dist.TCPStore("127.0.0.1", PORT, world_size, False, datetime.timedelta(seconds=timeout),
                         **EXTRA)


def expect(what, got, want):
    if got != want:
        sys.exit(f"FAIL {what}: got {got!r}, want {want!r}")
    checked.append(what)


s = client()
s.set("k1", "v1")
expect("set/get", s.get("k1"), b"v1")
s.set("bin", b"\x00\xff\x10")
expect("binary value", s.get("bin"), b"\x00\xff\x10")
expect("add on a missing key", s.add("cnt", 5), 5)
expect("add negative", s.add("cnt", -3), 2)
expect("counter stored as ASCII", s.get("cnt"), b"2")
expect("compare_set creates with empty expected", s.compare_set("cs", "", "new"), b"new")
expect("compare_set on missing key echoes expected", s.compare_set("cs2", "x", "y"), b"x")
expect("compare_set mismatch returns current", s.compare_set("cs", "wrong", "z"), b"new")
expect("compare_set match swaps", s.compare_set("cs", "new", "z"), b"z")
s.wait(["k1", "cnt"])
checked.append("wait on existing keys")
expect("num_keys", s.num_keys(), 4)
expect("delete_key existing", s.delete_key("k1"), True)
expect("delete_key missing", s.delete_key("nope"), False)
expect("num_keys after delete", s.num_keys(), 3)
if hasattr(s, "check"):
    expect("check present", s.check(["cnt"]), True)
    expect("check missing", s.check(["cnt", "nope"]), False)

# A blocking get, woken by another client's set.
writer = client()
threading.Timer(0.5, lambda: writer.set("late", "arrived")).start()
start = time.monotonic()
expect("blocking get woken by another client", s.get("late"), b"arrived")
expect("blocking get waited for the set", time.monotonic() - start >= 0.4, True)

# A wait that times out, then more operations on the same client.
start = time.monotonic()
try:
    s.wait(["never"], datetime.timedelta(seconds=1))
    sys.exit("FAIL wait on a missing key did not time out")
except Exception as error:  # 1.13: RuntimeError("Socket Timeout"); 2.x: DistStoreError
    expect("wait timed out after ~1 s", 0.9 <= time.monotonic() - start < 5, True)
    checked.append(f"timeout raised {type(error).__name__}")
expect("add after the timeout", s.add("cnt", 1), 3)
s.set("after", "ok")
expect("get after the timeout", s.get("after"), b"ok")
expect("num_keys after the timeout", s.num_keys(), 5)

if MAJOR >= 2:
    s.append("ap", "ab")
    s.append("ap", "c")
    expect("append", s.get("ap"), b"abc")
    s.multi_set(["m1", "m2"], ["1", "22"])
    expect("multi_set/multi_get", s.multi_get(["m1", "m2"]), [b"1", b"22"])
    expect("multi_get waits for keys", s.multi_get(["m2"]), [b"22"])

# Worker registration as env:// does it: world_size given, every client ADDs "init/" (no "/").
before = s.num_keys()
registered = [client(world_size=2) for _ in range(2)]
expect("worker registration creates the unprefixed init/ key", s.num_keys(), before + 1)

print(f"torch {torch.__version__}: {len(checked)} checks passed:", "; ".join(checked))
