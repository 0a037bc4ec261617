"""A worker for tests/launcher/job_control_test.py (Ctrl-Z stops the whole job).

Rank 2 exits 0 at once, so the exit timeout's clock starts. Ranks 0 and 1 report progress once
($DDPRUN_HEARTBEAT_FILE), then wait quietly (no CPU, no output) for STEPS steps of 0.1 s, counted
in running time (a stopped process does not step), and exit 0: within --hang-timeout and
--exit-timeout of running time, but not of wall time if the job stays stopped longer than those.
Rank 1 has a child of its own that must stop and continue with it.
Each rank prints "ready rank R pid P child C" (C = 0: none) once it is waiting, "done rank R" at
the end.
"""
import os
import subprocess
import sys
import time

RANK = int(os.environ["RANK"])
STEPS = int(os.environ.get("STEPS", "25"))


def main():
    beat = os.environ.get("DDPRUN_HEARTBEAT_FILE")
    if beat:
        os.utime(beat)
    child = None
    if RANK == 1:
        child = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(0.05)"])
    print(f"ready rank {RANK} pid {os.getpid()} child {child.pid if child else 0}", flush=True)
    if RANK == 2:
        return 0
    for _ in range(STEPS):
        time.sleep(0.1)
    if child:
        child.kill()
        child.wait()
    print(f"done rank {RANK}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
