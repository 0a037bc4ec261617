#!/usr/bin/env python3
"""PyTorch's Flight Recorder asked for its dump before a hung rank is killed (issue 39, point 5),
under the real ddprun with real worker processes: a stand-in for torch's dump pipe
(workers/flight_recorder_worker.py: no GPU, no torch needed) on two ranks, rank 1 hung under
--hang-timeout 2, --max-restarts 0 so the failure summary is printed.

  flight_recorder_test.py --ddprun BIN --python PY --scenario dump|user-pipe|no-reader

dump       TORCH_NCCL_TRACE_BUFFER_SIZE=2000 only: the agent sets the pipe and dump prefixes;
           rank 1's pipe is read (and its dump written) before it is killed, and the summary
           names the dump, in rank 1's directory of the attempt.
user-pipe  the user set TORCH_NCCL_DEBUG_INFO_PIPE_FILE and TORCH_NCCL_DEBUG_INFO_TEMP_FILE: the
           agent keeps them and asks through the user's pipe.
no-reader  the FIFO is made but nobody reads it: the summary says so, and the kill is not held up
           (from "is hung" to the kill well within the evidence budget, 1.4 s by default; 5 s
           allows for a loaded machine).
"""
import argparse
import os
import re
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "workers", "flight_recorder_worker.py")
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from jobs import Deadline, Job, wait_all  # noqa: E402

STAMP = r"^\[(\d+-\d+-\d+ \d+:\d+:[\d.]+)\] \[ddprun\] \[\w+\] "


def check(condition, why, job):
    if not condition:
        print(job.describe(), file=sys.stderr)
        sys.exit(f"FAILED: {why}")


def log_time(match):
    """Epoch seconds of an agent log line's stamp (local time, milliseconds)."""
    whole, fraction = match.group(1).split(".")
    return time.mktime(time.strptime(whole, "%Y-%m-%d %H:%M:%S")) + float("0." + fraction)


def recorded(scratch, rank):
    """The stand-in's record of rank `rank`: {"read": t, "dumped": t, ...}."""
    events = {}
    try:
        with open(os.path.join(scratch, "records", f"rank{rank}.txt")) as lines:
            for line in lines:
                what, at = line.split()
                events.setdefault(what, float(at))
    except FileNotFoundError:
        pass
    return events


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ddprun", required=True)
    parser.add_argument("--python", required=True)
    parser.add_argument("--scenario", required=True, choices=["dump", "user-pipe", "no-reader"])
    parser.add_argument("--timeout", type=float, default=60)
    args = parser.parse_args()
    deadline = Deadline(args.timeout)

    scratch = tempfile.mkdtemp(prefix="ddprun-fr-test-")
    os.mkdir(os.path.join(scratch, "records"))
    env = dict(os.environ, PYTHON_EXEC=args.python, FR_RECORD_DIR=os.path.join(scratch, "records"),
               TORCH_NCCL_TRACE_BUFFER_SIZE="2000")
    for name in ("TORCH_NCCL_DEBUG_INFO_PIPE_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
                 "TORCH_FR_DUMP_TEMP_FILE", "TORCH_FR_BUFFER_SIZE"):
        env.pop(name, None)
    if args.scenario == "user-pipe":
        env["TORCH_NCCL_DEBUG_INFO_PIPE_FILE"] = os.path.join(scratch, "my_pipe_")
        env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] = os.path.join(scratch, "my_trace_")
    logs = os.path.join(scratch, "logs")
    options = ["--standalone", "--nproc-per-node", "2", "--max-restarts", "0", "--hang-timeout", "2",
               "--log-dir", logs]
    mode = "no-reader" if args.scenario == "no-reader" else "dump"
    job = Job([args.ddprun, *options, WORKER, mode], name="ddprun", env=env)
    wait_all([job], deadline, f"Flight Recorder, {args.scenario}")
    err = job.errors

    check(job.returncode == 137, f"rank 1 hung and was killed: 137, no restart (got {job.returncode})", job)
    check("hung      : no progress reported for" in err, "the summary says rank 1 hung", job)
    rank1 = recorded(scratch, 1)
    check("ready" in rank1, f"rank 1's stand-in started (record: {rank1})", job)
    hung = re.search(STAMP + r"worker 1 \(rank 1, pid \d+\) is hung", err, re.M)
    killed = re.search(STAMP + r"worker 1 \(rank 1, pid \d+\) failed", err, re.M)
    check(hung and killed, "the agent logged the hang and the kill", job)
    summary_line = re.search(r"^  fr_dump   : (.*)$", err, re.M)
    check(summary_line, "the summary has an fr_dump line", job)

    if args.scenario in ("dump", "user-pipe"):
        if args.scenario == "dump":
            expected = re.compile(re.escape(logs) + r"/[^/]+/attempt_0/1/nccl_trace_rank_1$")
        else:
            expected = re.compile(re.escape(os.path.join(scratch, "my_trace_1")) + "$")
        dump = summary_line.group(1).strip()
        check(expected.match(dump), f"the summary names rank 1's dump where expected (got {dump!r})", job)
        check(os.path.isfile(dump) and os.path.getsize(dump) > 0, f"the dump {dump} exists", job)
        check("read" in rank1 and "dumped" in rank1, f"rank 1's pipe was read and it dumped (record: {rank1})", job)
        # The dump is written by rank 1 itself after the read: it was alive then. And the read
        # came before the agent saw it die.
        check(rank1["read"] < log_time(killed),
              f"the pipe was read ({rank1['read']:.3f}) before the kill was seen ({log_time(killed):.3f})", job)
        check(f"worker 1 (rank 1): Flight Recorder dump: {dump}" in err, "the agent's log names the dump", job)
        if args.scenario == "user-pipe":
            check(os.path.exists(os.path.join(scratch, "my_pipe_1.pipe")), "the user's pipe was used", job)
        print(f"pipe read {log_time(killed) - rank1['read']:.2f} s before the kill was seen; dump {dump}")
    else:
        line = summary_line.group(1)
        check("no Flight Recorder reader on " in line and "nccl_pipe_rank_1.pipe (is the process group NCCL?)" in line,
              f"the summary says nobody read the pipe (got {line!r})", job)
        check("read" not in rank1, "nothing read rank 1's pipe", job)
        took = log_time(killed) - log_time(hung)
        check(took < 5, f"the kill came {took:.2f} s after the hang was found: not held up", job)
        print(f"hang found -> rank 1 killed: {took:.2f} s")
    print(f"Flight Recorder, {args.scenario}: as expected")
    print(err[-3000:])
    shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
