#!/usr/bin/env python3
"""`ddprun launch` beside `python -m torch.distributed.launch` (issue #40), real jobs of 2 workers:

    legacy_launch_test.py --ddprun BIN --scenario torch113|torch26

For each way a script written for torch.distributed.launch finds its local rank - argparse's
`--local_rank` (type int, default -1, as tutorials write it; torch 1.13), `--local-rank` (torch
2.6), or LOCAL_RANK with --use_env (both) - the script runs under torch.distributed.launch of that
torch and under `ddprun launch` with that torch's interpreter as PYTHON_EXEC. Each worker trains a
small DDP model (gloo, fixed seed, 3 steps) and writes what it saw: its local rank as the script
read it, RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, its arguments and the parameters' checksum. The two
launchers' records must be the same, rank by rank: the same local rank, world and arguments
(torch.distributed.launch's --local_rank=N or --local-rank=N right after the script), and the
same trained parameters. torch26 is skipped (77) without the torch 2.6 chroot.
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from ports import free_port  # noqa: E402
from side_by_side import SKIP, TORCHRUN, fail, run, scenario_main  # noqa: E402

REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
TORCH2 = os.path.join(REPO, "scripts", "torch2-python")

SCRIPT = r'''
import argparse, json, os, sys
mode = os.environ["LL_MODE"]
parser = argparse.ArgumentParser()
if mode == "local_rank":
    parser.add_argument("--local_rank", type=int, default=-1)
elif mode == "local-rank":
    parser.add_argument("--local-rank", type=int, default=-1)
parser.add_argument("--steps", type=int, default=1)
args = parser.parse_args()
local_rank = args.local_rank if mode != "use-env" else int(os.environ["LOCAL_RANK"])
import torch
import torch.distributed as dist
torch.manual_seed(0)
dist.init_process_group("gloo")
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(args.steps):
    torch.manual_seed(100 * step + dist.get_rank())
    loss = model(torch.randn(4, 8)).square().sum()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
checksum = sum(float(p.detach().double().sum()) for p in model.parameters())
record = {"local_rank": local_rank, "rank": os.environ["RANK"], "world": os.environ["WORLD_SIZE"],
          "local_world": os.environ["LOCAL_WORLD_SIZE"], "argv": sys.argv[1:],
          "checksum": round(checksum, 9)}
with open(os.path.join(os.environ["LL_OUT"], os.environ["RANK"] + ".json"), "w") as f:
    json.dump(record, f)
dist.destroy_process_group()
'''

# torch.distributed.launch of Debian's torch 1.13 on Python 3.11: the shared torchrun wrapper's
# fix applied first (run under another name, it only patches), then the launcher's own main().
LAUNCH113 = ["/usr/bin/python3", "-c",
             "import runpy; runpy.run_path(%r, run_name='patch'); "
             "from torch.distributed.launch import main; main()" % TORCHRUN]


def records(out):
    found = {}
    for name in sorted(os.listdir(out)):
        with open(os.path.join(out, name)) as f:
            found[name] = json.load(f)
    return found


def one(label, argv, env, work, mode):
    out = os.path.join(work, label.replace(" ", "-") + "-" + mode)
    os.mkdir(out)
    env = dict(env, LL_MODE=mode, LL_OUT=out)
    done = run(argv, env, work, timeout=180, hint=f" ({label}, {mode})")
    if done.returncode != 0:
        fail(f"{label} ({mode}) exited {done.returncode}\n--- stdout\n{done.stdout}\n--- stderr\n"
             f"{done.stderr}")
    seen = records(out)
    if sorted(seen) != ["0.json", "1.json"]:
        fail(f"{label} ({mode}): expected the records of ranks 0 and 1, found {sorted(seen)}\n"
             f"{done.stderr}")
    return seen, done


def side_by_side(args, work, torch_launch, python, modes, spelling):
    script = os.path.join(work, "train.py")
    with open(script, "w") as f:
        f.write(SCRIPT)
    env = dict(os.environ)
    env.pop("PYTHON_EXEC", None)
    for mode in modes:
        use_env = ["--use_env"] if mode == "use-env" else []
        common = ["--nproc_per_node", "2", *use_env]
        tail = [script, "--steps", "3"]
        theirs, _ = one("torch.distributed.launch", torch_launch + common + [
            "--master_port", str(free_port())] + tail, env, work, mode)
        ours, done = one("ddprun launch", [args.ddprun, "launch", *common, "--master_port",
                                           str(free_port()), *tail],
                         dict(env, PYTHON_EXEC=python), work, mode)
        for rank in ("0.json", "1.json"):
            if ours[rank] != theirs[rank]:
                fail(f"{mode}, rank {rank[0]}: ddprun launch saw {ours[rank]}, "
                     f"torch.distributed.launch {theirs[rank]}\n--- ddprun's stderr\n{done.stderr}")
        local = [ours[rank]["local_rank"] for rank in ("0.json", "1.json")]
        if local != [0, 1]:
            fail(f"{mode}: the workers read local ranks {local}, not [0, 1]")
        expected = [] if mode == "use-env" else [f"{spelling}=0"]
        if ours["0.json"]["argv"] != expected + ["--steps", "3"]:
            fail(f"{mode}: rank 0's arguments are {ours['0.json']['argv']}")
        if mode != "use-env" and f"each worker gets {spelling}=LOCAL_RANK" not in done.stderr:
            fail(f"{mode}: ddprun launch does not say what it passes\n{done.stderr}")
        print(f"{mode}: the same local ranks, world, arguments and parameters "
              f"(checksum {ours['0.json']['checksum']}) as torch.distributed.launch")


def torch113(args, work):
    side_by_side(args, work, LAUNCH113, "/usr/bin/python3", ["local_rank", "use-env"],
                 "--local_rank")


def torch26(args, work):
    if not os.path.exists(TORCH2) or subprocess.run(
            [TORCH2, "-c", "import torch"], capture_output=True, timeout=120).returncode != 0:
        print("SKIP: the torch 2.6 chroot is not there (scripts/setup-torch2-chroot.sh)")
        sys.exit(SKIP)
    side_by_side(args, work, [TORCH2, "-m", "torch.distributed.launch"], TORCH2,
                 ["local-rank", "use-env"], "--local-rank")


if __name__ == "__main__":
    scenario_main(__doc__, {"torch113": torch113, "torch26": torch26},
                  prefix="ddprun-legacy-launch-")
