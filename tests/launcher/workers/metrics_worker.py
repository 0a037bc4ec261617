"""A worker for tests/launcher/metrics_test.py (no torch): every rank reports progress (os.utime of
$DDPRUN_HEARTBEAT_FILE) every 0.1 s. In the first attempt rank 1 exits 1 after 0.5 s, in the second
rank 0 exits 2 after 0.5 s (two restarts of the worker class); from the third every rank runs until
the file $METRICS_DONE_FILE appears, then exits 0.
"""
import os
import sys
import time

RANK = int(os.environ.get("RANK", "-1"))
RESTART = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
DONE_FILE = os.environ["METRICS_DONE_FILE"]
LIMIT = 120  # seconds: never outlive the test, whatever happens to the agent


def report_progress():
    beat = os.environ.get("DDPRUN_HEARTBEAT_FILE")
    if beat:
        os.utime(beat)


def main():
    started = time.monotonic()
    while time.monotonic() - started < LIMIT:
        report_progress()
        if time.monotonic() - started > 0.5:
            if RESTART == 0 and RANK == 1:
                sys.exit(1)
            if RESTART == 1 and RANK == 0:
                sys.exit(2)
        if RESTART >= 2 and os.path.exists(DONE_FILE):
            return
        time.sleep(0.1)


if __name__ == "__main__":
    main()
