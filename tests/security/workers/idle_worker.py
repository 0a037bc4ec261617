"""A worker that says it is up, then waits to be stopped (no torch): a job that runs for as long as
an attack on its store takes.

    idle_worker.py [SECONDS]

Prints "worker up (restart C)" first (TORCHELASTIC_RESTART_COUNT), then sleeps SECONDS (60 by
default) and exits 0.
"""
import os
import sys
import time

seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 60
print("worker up (restart %s)" % os.environ.get("TORCHELASTIC_RESTART_COUNT", "?"), flush=True)
time.sleep(seconds)
