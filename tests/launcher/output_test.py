#!/usr/bin/env python3
"""Worker output as the worker wrote it (issue #19, point 2), side by side with torchrun 1.13.

    output_test.py --ddprun BIN --scenario NAME [--torchrun-python PY]

  bar-pty     the launcher's stdout and stderr are one pseudo-terminal; worker 0 draws a tqdm bar
              (a hand-drawn "\\rNN%" bar where tqdm is missing) over ~2 s while worker 1 prints a
              few lines: the bar's updates reach the terminal as they are drawn (at least 3
              distinct percentages seen well before the bar ends), each one after the rank's
              prefix and no wider than the terminal
  order-pty   2 ranks alternate print() (stdout) and logging (stderr) records with sequence
              numbers, 200 each (a print and a logging record back to back, then 5 ms), on one
              pseudo-terminal: 0 records out of their rank's order and no line holding two
              records under ddprun
  order-pipe  the same through one pipe (2>&1 | tee)

torchrun 1.13 runs the same job beside ddprun and its figures are printed (not asserted: its
workers write straight to the terminal, so its order is the kernel's, and its bar has no prefix).
A record is "out of its rank's order" when its sequence number is lower than one already seen
from that rank. Every run is bounded (a timeout) and prints what it saw when it fails.
"""
import fcntl
import os
import pty
import re
import select
import shutil
import struct
import subprocess
import sys
import termios
import time
import tty

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from side_by_side import SKIP, TORCHRUN, fail, scenario_main, torchrun_command  # noqa: E402
RUN_TIMEOUT = 60  # seconds for one launcher run (torchrun 1.13 imports torch: a few seconds)
COLUMNS = 80  # the test terminal's width

# Worker 0 draws a bar of 20 steps, 0.1 s apart (tqdm's default mininterval), then says DONE;
# worker 1 prints three lines meanwhile, so the console has two ranks writing.
BAR_WORKER = r'''
import os, sys, time
rank = int(os.environ["RANK"])
if rank == 0:
    try:
        from tqdm import tqdm
    except ImportError:
        tqdm = None
    if tqdm is not None:
        for _ in tqdm(range(20), mininterval=0.1):  # as wide as its terminal
            time.sleep(0.1)
    else:
        for step in range(21):
            sys.stderr.write("\r%3d%%|%s|" % (step * 5, "#" * step))
            sys.stderr.flush()
            time.sleep(0.1)
        sys.stderr.write("\n")
    print("DONE", flush=True)
else:
    for step in range(3):
        time.sleep(0.5)
        print("rank 1 step %d" % step, flush=True)
'''

# Records alternate between stdout (print) and stderr (logging): a pair back to back, then 5 ms.
ORDER_WORKER = r'''
import logging, os, sys, time
rank = int(os.environ["RANK"])
logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(message)s")
for seq in range(200):
    if seq % 2 == 0:
        print("REC r%d s%d" % (rank, seq), flush=True)
    else:
        logging.info("REC r%d s%d", rank, seq)
        time.sleep(0.005)
'''


def launchers(args, script):
    """(name, argv, env) for ddprun and, where it is here, torchrun 1.13, running `script` on 2 workers."""
    env = dict(os.environ, PYTHON_EXEC=args.torchrun_python)
    runs = [("ddprun", [args.ddprun, "--standalone", "--nproc-per-node", "2", script], env)]
    if os.path.exists(TORCHRUN) and shutil.which(args.torchrun_python) is not None:
        runs.append(("torchrun 1.13", torchrun_command(args.torchrun_python, "--nproc_per_node", "2",
                                                        script), dict(os.environ)))
    else:
        print(f"torchrun side by side skipped: {TORCHRUN} or {args.torchrun_python} is missing")
    return runs


def on_terminal(argv, env, cwd):
    """Runs argv with stdout and stderr on one raw pseudo-terminal; returns (exit code, [(time, bytes)])."""
    master, slave = pty.openpty()
    tty.setraw(slave)  # "\n" stays "\n": the bytes read are the bytes written
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, COLUMNS, 0, 0))
    start = time.monotonic()
    try:
        process = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=slave,
                                   stderr=slave, start_new_session=True)
    finally:
        os.close(slave)
    chunks = []
    deadline = start + RUN_TIMEOUT
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if not ready:
                if process.poll() is not None:
                    break
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every writer of the terminal is gone
                break
            if not data:
                break
            chunks.append((time.monotonic() - start, data))
        else:
            process.kill()
            process.wait()
            fail(f"{argv[0]} did not finish within {RUN_TIMEOUT} s; it wrote:\n"
                 + b"".join(c for _, c in chunks).decode(errors="replace"))
        code = process.wait(timeout=RUN_TIMEOUT)
    finally:
        os.close(master)
    return code, chunks


def through_pipe(argv, env, cwd):
    """Runs argv with stdout and stderr on one pipe (2>&1); returns (exit code, text)."""
    try:
        done = subprocess.run(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired as expired:
        fail(f"{argv[0]} did not finish within {RUN_TIMEOUT} s; it wrote:\n"
             + (expired.stdout or b"").decode(errors="replace"))
    return done.returncode, done.stdout.decode(errors="replace")


PERCENT = re.compile(rb"(\d+)%")


def bar_figures(chunks):
    """(percentages seen at least 0.3 s before DONE arrived, when DONE arrived, every \\r segment)."""
    done_at = None
    text = b""
    for at, data in chunks:
        text += data
        if done_at is None and b"DONE" in text:
            done_at = at
    if done_at is None:
        return None, None, text
    early = set()
    seen = b""
    for at, data in chunks:
        if at > done_at - 0.3:
            break
        seen += data
    for match in PERCENT.finditer(seen):
        early.add(int(match.group(1)))
    return early, done_at, text


def bar_pty(args, work):
    script = os.path.join(work, "bar.py")
    with open(script, "w") as out:
        out.write(BAR_WORKER)
    probe = subprocess.run([args.torchrun_python, "-c", "import tqdm"], capture_output=True)
    print("bar drawn by " + ("tqdm" if probe.returncode == 0 else "hand (tqdm is missing: apt-get install python3-tqdm)"))
    for name, argv, env in launchers(args, script):
        code, chunks = on_terminal(argv, env, work)
        early, done_at, text = bar_figures(chunks)
        shown = text.decode(errors="replace")
        if code != 0 or done_at is None:
            fail(f"{name} did not run the bar job (exit {code}); the terminal showed:\n{shown!r}")
        print(f"{name}: {len(early)} distinct percentages on the terminal at least 0.3 s before the bar "
              f"ended ({sorted(early)}), bar ended at {done_at:.2f} s, {len(chunks)} reads")
        if name != "ddprun":
            continue
        if len(early) < 3:
            fail(f"ddprun held the bar back: {sorted(early)} before the end; the terminal showed:\n{shown!r}")
        # The redrawn bar keeps its prefix: every "\r" that starts a redraw of rank 0's line is
        # followed by rank 0's prefix, and the bar with its prefix fits the terminal (the
        # worker's terminal is narrower by the prefix), so no redraw wraps; no line mixes the
        # two ranks.
        for line in text.split(b"\n"):
            for segment in line.split(b"\r")[1:]:
                if segment and not segment.startswith(b"[default0]:"):
                    fail(f"a redraw without rank 0's prefix: {segment!r} in line {line!r}")
                if len(segment.decode(errors="replace")) > COLUMNS:
                    fail(f"a redraw wider than the terminal's {COLUMNS} columns: {segment!r}")
            if b"[default1]:" in line and (b"%" in line or not line.startswith(b"[default1]:")):
                fail(f"a line mixes the two ranks: {line!r}")


RECORD = re.compile(r"REC r(\d) s(\d+)")


def order_figures(text):
    """(records found, records out of their rank's order, lines holding more than one record)."""
    highest = {}
    found = out_of_order = mixed = 0
    for line in text.replace("\r", "\n").split("\n"):
        records = RECORD.findall(line)
        if len(records) > 1:
            mixed += 1
        for rank, seq in records:
            found += 1
            seq = int(seq)
            if seq < highest.get(rank, -1):
                out_of_order += 1
            highest[rank] = max(highest.get(rank, -1), seq)
    return found, out_of_order, mixed


def order(args, work, terminal):
    script = os.path.join(work, "order.py")
    with open(script, "w") as out:
        out.write(ORDER_WORKER)
    where = "one pseudo-terminal" if terminal else "one pipe (2>&1)"
    for name, argv, env in launchers(args, script):
        if terminal:
            code, chunks = on_terminal(argv, env, work)
            text = b"".join(c for _, c in chunks).decode(errors="replace")
        else:
            code, text = through_pipe(argv, env, work)
        found, out_of_order, mixed = order_figures(text)
        print(f"{name} on {where}: {out_of_order} of {found} records out of their rank's order, "
              f"{mixed} lines holding two records")
        if name != "ddprun":
            continue
        if code != 0 or found != 400 or out_of_order != 0 or mixed != 0:
            fail(f"ddprun (exit {code}) on {where}: {found} records, {out_of_order} out of order, "
                 f"{mixed} mixed lines; it wrote:\n{text}")


SCENARIOS = {
    "bar-pty": bar_pty,
    "order-pty": lambda args, work: order(args, work, terminal=True),
    "order-pipe": lambda args, work: order(args, work, terminal=False),
}


def need_interpreter(args, work):
    if shutil.which(args.torchrun_python) is None:
        print(f"SKIP: {args.torchrun_python} (the workers' interpreter) is missing")
        sys.exit(SKIP)
    return ()


if __name__ == "__main__":
    scenario_main(__doc__, SCENARIOS, prefix="ddprun-output-test-", before=need_interpreter)
