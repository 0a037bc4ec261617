"""torch's own TCPStore client against a store: run under the torch being checked (1.13 or 2.6).

    torch_store_probe.py HOST PORT [TIMEOUT_SECONDS]

Connects as a client (is_master=False, no world size, as a worker's env:// rendezvous would with
TORCHELASTIC_USE_AGENT_STORE), then set and get a key. Exit 0 and "refused: <error> after S s"
when torch raises (a store that wants a token must refuse it); exit 1 and "ACCEPTED: ..." when the
round trip works. torch 1.13 sends nothing when it connects and nothing is answered to a set, so
the get is what shows a refusal.
"""
import datetime
import sys
import time

import torch.distributed as dist

host, port = sys.argv[1], int(sys.argv[2])
timeout = float(sys.argv[3]) if len(sys.argv) > 3 else 5.0
started = time.monotonic()
try:
    store = dist.TCPStore(host, port, is_master=False, timeout=datetime.timedelta(seconds=timeout))
    store.set("token_probe", "torch client")
    value = store.get("token_probe")
except Exception as error:  # whatever torch raises: DistNetworkError, RuntimeError, ...
    text = " ".join(str(error).split())[:300]
    print(f"refused: {type(error).__name__}: {text} after {time.monotonic() - started:.2f} s", flush=True)
    sys.exit(0)
print(f"ACCEPTED: set and got {value!r} after {time.monotonic() - started:.2f} s", flush=True)
sys.exit(1)
