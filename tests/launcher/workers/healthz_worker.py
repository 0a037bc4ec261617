"""A worker for tests/launcher/healthz_test.py (no torch): every rank reports progress
(os.utime of $DDPRUN_HEARTBEAT_FILE) every 0.1 s until the file $HEALTHZ_HANG_FILE appears; then
rank 1 stops reporting in a function with a telling name (--hang-timeout finds it hung), and
rank 0 ignores SIGTERM, so that the agent's stopping lasts its --shutdown-timeout and the test sees
/healthz answer 503 while it does.
"""
import os
import signal
import sys
import time

RANK = int(os.environ.get("RANK", "-1"))
HANG_FILE = os.environ["HEALTHZ_HANG_FILE"]
LIMIT = 120  # seconds: never outlive the test, whatever happens to the agent


def report_progress():
    beat = os.environ.get("DDPRUN_HEARTBEAT_FILE")
    if beat:
        os.utime(beat)


def stop_reporting_and_wait():
    time.sleep(LIMIT)


def main():
    end = time.monotonic() + LIMIT
    while not os.path.exists(HANG_FILE) and time.monotonic() < end:
        report_progress()
        time.sleep(0.1)
    print(f"rank {RANK}: hang file seen", flush=True)
    if RANK == 1:
        stop_reporting_and_wait()
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while time.monotonic() < end:
        report_progress()
        time.sleep(0.1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
