"""A worker under a token: where its store connections land, with the agent's relay handoff and
without it (a process that drops DDPRUN_RELAY_HANDOFF goes through the relay's port, the opt-out).

Each way it opens a plain socket to MASTER_ADDR:MASTER_PORT and notes the peer's port (the store's
own port when handed off, the relay's when not), then runs torch's TCPStore client there: a set,
an add and a get. One line per rank:
    rank R: handoff peer P1 store OK; without peer P2 store OK; relay port P
"""
import datetime
import os
import socket

import torch.distributed as dist

rank = os.environ["RANK"]
host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])


def landing():
    with socket.create_connection((host, port), timeout=10) as s:
        return s.getpeername()[1]


def store_round_trip(way):
    store = dist.TCPStore(host, port, is_master=False, timeout=datetime.timedelta(seconds=20))
    store.set(f"handoff/{way}/{rank}", way)
    store.add(f"handoff/{way}/count", 1)
    return "OK" if store.get(f"handoff/{way}/{rank}").decode() == way else "WRONG"


handed = landing()
handed_store = store_round_trip("handoff")
os.environ.pop("DDPRUN_RELAY_HANDOFF", None)
relayed = landing()
relayed_store = store_round_trip("relay")
print(f"rank {rank}: handoff peer {handed} store {handed_store}; without peer {relayed} "
      f"store {relayed_store}; relay port {port}", flush=True)
