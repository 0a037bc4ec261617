"""torch's own TCPStore server, for running ddprun's C++ client against it.

Prints "listening on 127.0.0.1:PORT" once the server is up and serves until stdin closes (the
test that started it ends) or it gets SIGTERM. Works with torch 1.13 and 2.x (classic backend
with USE_LIBUV=0; Debian's 2.6 build has no libuv).
"""
import datetime
import sys

import torch.distributed as dist

import torch

extra = {"use_libuv": False} if int(torch.__version__.split(".")[0]) >= 2 else {}
store = dist.TCPStore("127.0.0.1", 0, None, True, datetime.timedelta(seconds=60),
                      wait_for_workers=False, **extra)
print(f"listening on 127.0.0.1:{store.port}", flush=True)
sys.stdin.read()
