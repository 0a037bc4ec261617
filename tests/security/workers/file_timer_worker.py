"""A worker that asks its agent's FileTimer server (TORCHELASTIC_TIMER_FILE) for timers naming
processes that are not its own, then for one naming a child it starts, then for its own.

    file_timer_worker.py PID...

Each request is written as torch 1.13's FileTimerClient writes one (file_based_local_timer.py:
open the pipe O_WRONLY|O_NONBLOCK, one JSON line, close), because its acquire() can only name the
calling process. In order, printing what it sees:
  1. a 1 s timer with SIGKILL for each PID given and for the agent (its parent), then
  2. a 1 s timer with SIGTERM for a `sleep 30` it starts: "child ended with -15" when it worked;
  3. once every foreign timer is 2 s past due, "alive after the foreign timers", and
  4. a 1 s timer with SIGKILL for itself: it waits to be killed ("not killed by my own timer"
     and exit 3 after 20 s otherwise).
"""
import json
import os
import subprocess
import sys
import time

PATH = os.environ["TORCHELASTIC_TIMER_FILE"]


def request(pid, scope, seconds, signal):
    line = json.dumps({"version": 1, "pid": pid, "scope_id": scope,
                       "expiration_time": time.time() + seconds, "signal": signal})
    fd = os.open(PATH, os.O_WRONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "wt") as pipe:
        pipe.write(line + "\n")


agent = os.getppid()
foreign = [int(pid) for pid in sys.argv[1:]] + [agent]
print("worker %d: agent %d" % (os.getpid(), agent), flush=True)
for pid in foreign:
    request(pid, "foreign-%d" % pid, 1.0, 9)
due = time.time() + 1.0
print("asked for 1 s SIGKILL timers naming pids %s" % " ".join(map(str, foreign)), flush=True)

child = subprocess.Popen(["sleep", "30"])
request(child.pid, "child", 1.0, 15)
try:
    print("child ended with %d" % child.wait(timeout=10), flush=True)
except subprocess.TimeoutExpired:
    child.kill()
    print("child still running 10 s after its 1 s timer", flush=True)

time.sleep(max(0.0, due + 2.0 - time.time()))
print("alive after the foreign timers", flush=True)
request(os.getpid(), "own", 1.0, 9)
time.sleep(20)
print("not killed by my own timer", flush=True)
sys.exit(3)
