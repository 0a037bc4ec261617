"""A worker for tests/launcher/hang_test.py: one rank misbehaves in attempt 0 as --scenario says,
in a function with a telling name (the stack evidence must show it); in a later attempt
(TORCHELASTIC_RESTART_COUNT > 0) every rank exits 0.

  file-timer   rank 0 arms torch's FileTimer (expires(after=1)) and overruns it
  heartbeat    rank 1 reports progress (os.utime of $DDPRUN_HEARTBEAT_FILE), then stops reporting
  at-exit      rank 0 exits 0 at once; rank 1 lingers for ever (blocked, no CPU: the shape of
               torch 1.13's gloo teardown deadlock)
  busy-at-exit rank 1 exits 0 at once; rank 0 goes on working past --exit-timeout (a final
               evaluation: BUSY_SECONDS of CPU of its own, then as long again in a child process it
               waits for, as a wrapper whose child does the work), then exits 0
  oom          rank 1 moves into the memory-limited cgroup $OOM_CGROUP and allocates past it
"""
import os
import subprocess
import sys
import time

RANK = int(os.environ.get("RANK", "-1"))
ATTEMPT = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
SCENARIO = sys.argv[1]
FOREVER = 3600


def report_progress():
    # The two lines a training loop needs for ddprun --hang-timeout (docs/errors.md).
    beat = os.environ.get("DDPRUN_HEARTBEAT_FILE")
    if beat:
        os.utime(beat)


def stuck_under_file_timer():
    time.sleep(FOREVER)


def stop_reporting_and_wait():
    time.sleep(FOREVER)


def linger_after_peers():
    time.sleep(FOREVER)


def evaluate_after_peers(seconds):
    """Spins the CPU for `seconds` (of wall time), itself."""
    end = time.monotonic() + seconds
    total = 0
    while time.monotonic() < end:
        total += sum(i * i for i in range(10000))
    return total


def allocate_past_the_limit():
    hog = []
    while True:
        hog.append(bytearray(16 << 20))  # zero-filled: every page is touched
        print(f"rank {RANK}: holding {len(hog) * 16} MiB", file=sys.stderr, flush=True)


def main():
    if ATTEMPT > 0:
        print(f"rank {RANK}: attempt {ATTEMPT} done", flush=True)
        return 0
    if SCENARIO == "file-timer":
        from torch.distributed.elastic.timer import FileTimerClient, configure, expires
        configure(FileTimerClient(os.environ["TORCHELASTIC_TIMER_FILE"]))
        if RANK == 0:
            with expires(after=1):
                stuck_under_file_timer()
        time.sleep(FOREVER)  # stopped with the group
    elif SCENARIO == "heartbeat":
        for _ in range(5):
            report_progress()
            time.sleep(0.1)
        if RANK == 1:
            stop_reporting_and_wait()
        while True:
            report_progress()
            time.sleep(0.1)
    elif SCENARIO == "at-exit":
        if RANK == 1:
            linger_after_peers()
        return 0
    elif SCENARIO == "busy-at-exit":
        if RANK == 0:
            seconds = float(os.environ.get("BUSY_SECONDS", "3"))
            started = time.monotonic()
            evaluate_after_peers(seconds)
            # Then the work goes on in a child; this process only waits (no CPU of its own).
            subprocess.run([sys.executable, __file__, "busy-child", str(seconds)], check=True)
            print(f"rank 0: evaluated for {time.monotonic() - started:.1f} s after its peers exited",
                  flush=True)
        return 0
    elif SCENARIO == "busy-child":
        evaluate_after_peers(float(sys.argv[2]))
        return 0
    elif SCENARIO == "oom":
        if RANK == 1:
            with open(os.path.join(os.environ["OOM_CGROUP"], "cgroup.procs"), "w") as procs:
                procs.write(str(os.getpid()))
            allocate_past_the_limit()
        time.sleep(FOREVER)
    return 0


if __name__ == "__main__":
    sys.exit(main())
