#!/usr/bin/env python3
"""Times in the log prefix and progress from log lines (issue #39, points 3 and 4): the real ddprun
and real worker processes (plain Python, no torch), each run bounded.

    log_patterns_test.py --ddprun BIN --scenario NAME

  progress  --progress-pattern: a job whose 2 ranks print a matching line every 0.2 s for 4 s
            exits 0 under --hang-timeout 1.5 (no change to the script: no heartbeat file); then a
            job whose rank 1 goes on printing lines that do not match is hung within the timeout
            + 1 s of its last matching line (both times read from the console: the worker's line
            under --log-time, the agent's own "is hung" line); one worker per node keeps its
            lines bare on the console
  start     --start-pattern with --start-timeout 2: the rank that never prints its start line is
            hung (no_start) within 2 + 1 s of its start; the one that printed it is not
  fail      --fail-pattern 'loss nan' with --max-restarts 3: the rank that prints "loss nan" is
            ended at once, the summary names the pattern and the line, the job fails with the
            class "user" (the JSON event) and no restart
  time      --log-time puts HH:MM:SS.mmm (local, now) before the default prefix; a template with
            ${attempt} and ${elapsed}; with --log-dir the restart's own warning names the new
            attempt's directory and the lines after it carry the new attempt's number
"""
import json
import os
import re
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from side_by_side import check, fail, run, scenario_main  # noqa: E402

RUN_TIMEOUT = 60  # seconds for one job: the hang guard, far above what each needs (~5 s)
AGENT_TIME = re.compile(r"^\[\d{4}-\d\d-\d\d (\d\d):(\d\d):(\d\d)\.(\d{3})\] \[ddprun\]")
LINE_TIME = re.compile(r"^(\d\d):(\d\d):(\d\d)\.(\d{3}) ")


def seconds_of(match):
    h, m, s, ms = (int(part) for part in match.groups())
    return h * 3600 + m * 60 + s + ms / 1000.0


def apart(later, earlier):
    """Seconds from `earlier` to `later` (times of day), across midnight too."""
    return (later - earlier) % 86400


def write_worker(work, name, body):
    path = os.path.join(work, name)
    with open(path, "w") as out:
        out.write("import os, sys, time\nrank = int(os.environ['RANK'])\n" + body)
    return path


def ddprun(args, work, *options, script, env=None):
    environment = dict(os.environ, OMP_NUM_THREADS="1")
    environment.update(env or {})
    argv = [args.ddprun, "--standalone", *options, "--no-python", sys.executable, script]
    return run(argv, environment, work, timeout=RUN_TIMEOUT)


def lines_of(done):
    return (done.stdout + done.stderr).splitlines()


def progress(args, work):
    alive = write_worker(work, "alive.py", """
for step in range(20):
    print("step %d" % step, flush=True)
    time.sleep(0.2)
""")
    done = ddprun(args, work, "--nproc-per-node", "2", "--hang-timeout", "1.5",
                  "--progress-pattern", "^step [0-9]+$", script=alive)
    check(done.returncode == 0, "a job printing matching lines was not left to finish", done)
    check("is hung" not in done.stderr, "a rank printing matching lines was found hung", done)

    silent = write_worker(work, "silent.py", """
for step in range(5):
    print("step %d" % step, flush=True)
    time.sleep(0.2)
for tick in range(300):
    # Output, but no matching line: not progress.
    print(("still here %d" % tick) if rank == 1 else ("step %d" % (5 + tick)), flush=True)
    time.sleep(0.2)
""")
    timeout = 1.5
    started = time.monotonic()
    done = ddprun(args, work, "--nproc-per-node", "2", "--hang-timeout", str(timeout),
                  "--progress-pattern", "^step [0-9]+$", "--max-restarts", "0", "--log-time",
                  script=silent)
    took = time.monotonic() - started
    check(done.returncode != 0, "the silent rank was not caught", done)
    last_step = None
    hung_at = None
    for line in lines_of(done):
        if "[default1]:step " in line:
            match = LINE_TIME.match(line)
            check(match is not None, f"no time before the prefix: {line!r}", done)
            last_step = seconds_of(match)
        if "worker 1 (rank 1" in line and "is hung: no progress reported" in line:
            hung_at = seconds_of(AGENT_TIME.match(line))
    check(last_step is not None and hung_at is not None,
          "no last step line of rank 1 or no 'is hung' line of the agent", done)
    lag = apart(hung_at, last_step)
    print(f"rank 1: last matching line at {last_step:.3f}, found hung at {hung_at:.3f}: "
          f"{lag:.3f} s (--hang-timeout {timeout}); the job took {took:.1f} s")
    check(timeout - 0.05 <= lag <= timeout + 1.0,
          f"rank 1 found hung {lag:.3f} s after its last matching line, not within "
          f"{timeout} + 1 s", done)
    check("is hung" not in "\n".join(l for l in lines_of(done) if "worker 0 (rank 0" in l),
          "rank 0, printing matching lines, was found hung", done)

    # One worker per node: its lines pass through the agent for the pattern, and still reach the
    # console bare, as when the worker writes to the console itself.
    one = write_worker(work, "one.py", 'print("step 1", flush=True)\n')
    done = ddprun(args, work, "--hang-timeout", "5", "--progress-pattern", "^step", script=one)
    check(done.returncode == 0 and done.stdout == "step 1\n",
          "one worker's line did not reach the console as written", done)


def start(args, work):
    script = write_worker(work, "start.py", """
if rank == 0:
    print("training started", flush=True)
else:
    print("loading, training started later", flush=True)  # not at the start of the line
for step in range(300):
    print("step %d" % step, flush=True)
    time.sleep(0.2)
""")
    limit = 2.0
    started = time.monotonic()
    done = ddprun(args, work, "--nproc-per-node", "2", "--start-pattern", "^training started",
                  "--start-timeout", str(limit), "--max-restarts", "0",
                  "--event-log-handler", "console", script=script)
    took = time.monotonic() - started
    check(done.returncode != 0, "the rank with no start line was not caught", done)
    hung = [line for line in lines_of(done) if "is hung: wrote no line matching --start-pattern"
            in line]
    check(len(hung) == 1 and "worker 1 (rank 1" in hung[0],
          "not exactly rank 1 found hung for its start line", done)
    check("(--start-timeout 2)" in hung[0], "the hung line does not name --start-timeout", done)
    events = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    unhealthy = [e for e in events if e["name"] == "torchelastic.worker.status.UNHEALTHY"]
    check(len(unhealthy) == 1 and json.loads(unhealthy[0]["metadata"]["metadata"])["hang"]
          == "no_start", "no UNHEALTHY event of kind no_start", done)
    print(f"the job took {took:.1f} s with --start-timeout {limit}")
    check(took <= limit + 1.0 + 3.0, f"the job took {took:.1f} s", done)


def fail_pattern(args, work):
    script = write_worker(work, "nan.py", """
for step in range(300):
    loss = "nan" if rank == 1 and step == 3 else "%.3f" % (2.0 / (step + 1))
    print("step %d loss %s" % (step, loss), flush=True)
    time.sleep(0.1)
""")
    started = time.monotonic()
    done = ddprun(args, work, "--nproc-per-node", "2", "--fail-pattern", "loss nan",
                  "--max-restarts", "3", "--event-log-handler", "console", script=script)
    took = time.monotonic() - started
    check(done.returncode != 0, "the job did not fail", done)
    check("  failed    : wrote a line matching --fail-pattern 'loss nan': \"step 3 loss nan\""
          in done.stderr, "the summary does not name the pattern and the line", done)
    events = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    failed = [e for e in events if e["name"] == "ddprun.job.failed"]
    check(len(failed) == 1, "no ddprun.job.failed event", done)
    extra = json.loads(failed[0]["metadata"]["metadata"])
    check(extra.get("failure_class") == "user", f"the class is not user: {extra}", done)
    raw = json.loads(failed[0]["metadata"]["raw_error"])
    check(raw["hang"] == "fail_pattern" and raw["rank"] == 1, f"the root cause: {raw}", done)
    check("restarting the job" not in done.stderr, "the job restarted after a --fail-pattern line",
          done)
    check("user failure: a worker wrote a line matching --fail-pattern" in done.stderr,
          "the last line does not say why", done)
    print(f"the job failed in {took:.1f} s")
    check(took <= 10, f"the job took {took:.1f} s to end after the line", done)


def times(args, work):
    script = write_worker(work, "hello.py", """
print("hello from %d" % rank, flush=True)
time.sleep(0.3)
if int(os.environ["TORCHELASTIC_RESTART_COUNT"]) == 0 and rank == 1:
    sys.exit(3)
""")
    before = time.time()
    done = ddprun(args, work, "--nproc-per-node", "2", "--log-time", script=script)
    check(done.returncode != 0, "rank 1's exit 3 did not fail the job", done)
    hello = [line for line in done.stdout.splitlines() if "hello from" in line]
    check(len(hello) == 2, "not two hello lines", done)
    now = time.localtime(before)
    expected = now.tm_hour * 3600 + now.tm_min * 60 + now.tm_sec
    for line in hello:
        match = re.match(r"^(\d\d):(\d\d):(\d\d)\.(\d{3}) \[default[01]\]:hello from [01]$", line)
        check(match is not None, f"not 'HH:MM:SS.mmm [default<r>]:': {line!r}", done)
        check(apart(seconds_of(match), expected) <= 10, f"not the local time now: {line!r}", done)

    logs = os.path.join(work, "logs")
    done = ddprun(args, work, "--nproc-per-node", "2", "--max-restarts", "1", "--log-dir", logs,
                  "--tee", "3", script=script,
                  env={"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE":
                       "<${attempt}> ${elapsed} [${role_name}${local_rank}]:"})
    check(done.returncode == 0, "the job did not succeed on its restart", done)
    lines = lines_of(done)
    prefixed = [re.match(r"^<(\d+)> \+(\d+\.\d{3})s \[default([01])\]:hello from ([01])$", line)
                for line in lines if "hello from" in line]
    check(len(prefixed) == 4 and all(prefixed), "not four hello lines with the template", done)
    attempts = sorted({int(m.group(1)) for m in prefixed})
    check(len(attempts) == 2, f"the lines do not name two attempts: {attempts}", done)
    warned = [line for line in lines if "the workers' log files are in" in line]
    check(len(warned) == 1 and "[warning]" in warned[0] and
          warned[0].rstrip().endswith(f"attempt_{attempts[1]}"),
          "the restart's warning does not name the new attempt's directory", done)
    directory = warned[0].rsplit(" ", 1)[1]
    with open(os.path.join(directory, "1", "stdout.log")) as log:
        check(log.read() == "hello from 1\n", "the new attempt's log file", done)
    # The lines after the warning are the new attempt's.
    after = lines[lines.index(warned[0]) + 1:]
    check(all(line.startswith(f"<{attempts[1]}>") for line in after if "hello from" in line),
          "a line after the restart's warning is not the new attempt's", done)
    elapsed = [float(m.group(2)) for m in prefixed]
    check(all(0 <= e < RUN_TIMEOUT for e in elapsed), f"elapsed seconds: {elapsed}", done)


if __name__ == "__main__":
    scenario_main(__doc__, {"progress": progress, "start": start, "fail": fail_pattern,
                            "time": times}, prefix="ddprun-log-patterns-test-")
