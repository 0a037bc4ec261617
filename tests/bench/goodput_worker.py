"""The training loop of bench_goodput.py: a small model trained with DDP over gloo, one process per
node, a checkpoint every CHECKPOINT_EVERY steps, run unchanged under ddprun, torchrun 1.13 and
torchrun 2.6.

    goodput_worker.py WORK

It stamps what it does into WORK/stamps, one line each ("<epoch> <agent> <rank> <pid> <what>
[value]"): start (before torch's import), ready (process group up, checkpoint loaded: the step it
resumes from), step N, term (a SIGTERM arrived, stamped by a thread so that a rank blocked in a
collective stamps it at once), error (a collective failed: a peer is gone), saved N, drained,
crash, hang, lemon, finished. The driver injects faults through files in WORK, each for one agent
(AGENT_NAME): crash.<agent> (exit 1 at the next step, once), hang.<agent> (stop stepping, once),
lemon.<agent> (from now on, every start: exit 1 at the third step).

Stopping: on SIGTERM, or once DDPRUN_STOP_FILE appears (ddprun's drain), the ranks agree at the
next step boundary, rank 0 saves a checkpoint, and all exit 0; a rank that cannot reach a step
boundary within GRACE_S (its peer is gone or hung) exits 143. Every launcher gets the same rule.
"""
import datetime
import os
import signal
import sys
import threading
import time

WORK = sys.argv[1]
AGENT = os.environ.get("AGENT_NAME", "?")
RANK = int(os.environ["RANK"])
STEP_S = 0.08           # the step's simulated device time, beside its real CPU work
CHECKPOINT_EVERY = 20   # steps
GRACE_S = 3.0           # seconds a signalled rank may take to reach a step boundary
COLLECTIVE_TIMEOUT_S = 30  # the process group's timeout: how torchrun learns of a hung peer

stamps = os.open(os.path.join(WORK, "stamps"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)


def stamp(what, value=""):
    os.write(stamps, f"{time.time():.6f} {AGENT} {RANK} {os.getpid()} {what} {value}\n".encode())


stamp("start")
hung = False
asked = False


def on_term(signum, frame):
    global asked
    asked = True
    if hung:
        os._exit(143)


def watch_signals(fd):
    while True:
        if signal.SIGTERM not in os.read(fd, 64):
            continue
        stamp("term")
        if hung:
            os._exit(143)
        time.sleep(GRACE_S)
        stamp("grace")
        os._exit(143)


signal.signal(signal.SIGTERM, on_term)
wake_read, wake_write = os.pipe()
os.set_blocking(wake_write, False)
signal.set_wakeup_fd(wake_write)
threading.Thread(target=watch_signals, args=(wake_read,), daemon=True).start()


def claimed(name):
    """Whether the one-shot fault file `name` was there; it is taken so it fires once."""
    path = os.path.join(WORK, name)
    try:
        os.rename(path, path + ".taken")
        return True
    except OSError:
        return False


import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

torch.set_num_threads(1)
torch.manual_seed(0)
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S))
model = torch.nn.parallel.DistributedDataParallel(
    torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
checkpoint = os.path.join(WORK, "checkpoint.pt")
step = 0
if os.path.exists(checkpoint):
    state = torch.load(checkpoint)
    model.module.load_state_dict(state["model"])
    step = state["step"]
stamp("ready", step)


def save(at):
    if RANK == 0:
        torch.save({"model": model.module.state_dict(), "step": at}, checkpoint + ".tmp")
        os.replace(checkpoint + ".tmp", checkpoint)
        stamp("saved", at)


heartbeat = os.environ.get("DDPRUN_HEARTBEAT_FILE")
stop_file = os.environ.get("DDPRUN_STOP_FILE")
lemon = os.path.join(WORK, f"lemon.{AGENT}")
started = 0
try:
    while True:
        if claimed(f"crash.{AGENT}"):
            stamp("crash", step)
            os._exit(1)
        if claimed(f"hang.{AGENT}"):
            stamp("hang", step)
            hung = True
            time.sleep(3600)
        if started >= 2 and os.path.exists(lemon):
            stamp("lemon", step)
            os._exit(1)
        loss = model(torch.randn(64, 256)).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        time.sleep(STEP_S)
        stopping = asked or bool(stop_file and os.path.exists(stop_file))
        finishing = RANK == 0 and os.path.exists(os.path.join(WORK, "finish"))
        flags = torch.tensor([float(stopping), float(finishing)])
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        step += 1
        started += 1
        stamp("step", step)
        if heartbeat:
            os.utime(heartbeat)
        if flags[0] > 0 or flags[1] > 0 or step % CHECKPOINT_EVERY == 0:
            save(step)
        if flags[0] > 0:
            stamp("drained", step)
            sys.exit(0)
        if flags[1] > 0:
            stamp("finished", step)
            sys.exit(0)
except Exception as error:  # a collective failed: a peer is gone
    stamp("error", type(error).__name__)
    os._exit(1)
