#!/usr/bin/env python3
"""ddprun under the environment srun sets, with no rendezvous flags (docs/slurm.md), as real runs.

  slurm_env_test.py --ddprun BIN --python PY --scenario ddp|double-task|no-step|port-taken

ddp: the environment of a 2-node step on "nodes" 127.0.0.1 and 127.0.0.2 (SLURM_STEP_NODELIST
127.0.0.[1-2]; both agents on this machine), two ddprun agents started with only
--nproc-per-node 2 and the script: real DDP training (examples/train_ddp.py, gloo) on 4 ranks,
both exit 0, ranks 0..3 each seen once, rank 0 confirms a world of 4, both say the Slurm line.
double-task: two tasks of the step on one node (SLURM_STEP_TASKS_PER_NODE=2): exit 2 naming
`srun --ntasks-per-node=1`, no worker started. no-step: SLURM_JOB_ID without SLURM_STEP_ID (the
batch script): exit 2 naming srun. port-taken: the port derived from the job and step ids is
held by another socket: exit 2, one line naming the port and DDPRUN_SLURM_PORT.
"""
import argparse
import atexit
import os
import re
import shutil
import socket
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "..", "examples", "train_ddp.py")
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from jobs import SKIP, Deadline, Job, run, torch_version, wait_all  # noqa: E402

JOB = 4000 + os.getpid() % 1000  # port 20000 + 10 * (pid % 1000) + step: rarely one in use


def clean_environment(python):
    """This process's environment without any Slurm or PET_ variable (the test may itself run
    under Slurm), workers on `python`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "PET_", "DDPRUN_SLURM"))}
    env["PYTHON_EXEC"] = python
    return env


def srun_environment(python, node_id, nodes, nodelist, job=JOB, step=0, tasks_per_node="1"):
    """What srun sets for the task on node `node_id` of a step, one task per node unless told."""
    per = int(tasks_per_node)
    env = clean_environment(python)
    hosts = [f"127.0.0.{i + 1}" for i in range(nodes)]
    env.update({
        "SLURM_JOB_ID": str(job), "SLURM_JOBID": str(job),
        "SLURM_STEP_ID": str(step), "SLURM_STEPID": str(step),
        "SLURM_JOB_NUM_NODES": "8", "SLURM_NNODES": str(nodes),  # the allocation is larger
        "SLURM_JOB_NODELIST": "127.0.0.[1-8]",
        "SLURM_STEP_NUM_NODES": str(nodes), "SLURM_STEP_NODELIST": nodelist,
        "SLURM_STEP_NUM_TASKS": str(nodes * per), "SLURM_NTASKS": str(nodes * per),
        "SLURM_STEP_TASKS_PER_NODE": f"{per}(x{nodes})" if nodes > 1 else str(per),
        "SLURM_NODEID": str(node_id), "SLURM_PROCID": str(node_id * per), "SLURM_LOCALID": "0",
        "SLURMD_NODENAME": hosts[node_id],
    })
    return env


def expect_exit_2(job, must_say, what):
    text = job.errors + job.output
    if job.returncode != 2:
        sys.exit(f"FAIL: {what}: exit {job.returncode}, expected 2; it said:\n{text}")
    lines = [l for l in text.splitlines() if l.startswith("ddprun: error:")]
    if len(lines) != 1 or not all(s in lines[0] for s in must_say):
        sys.exit(f"FAIL: {what}: expected one error line saying {must_say}; it said:\n{text}")
    if "[default" in text:
        sys.exit(f"FAIL: {what}: a worker ran:\n{text}")
    print(f"{what}: exit 2, {lines[0]}")


def ddp(args, deadline):
    version = torch_version(args.python, deadline.cap(90))
    if version is None:
        return SKIP
    work = tempfile.mkdtemp(prefix="ddprun-slurm-")
    atexit.register(shutil.rmtree, work, ignore_errors=True)  # the checkpoint is checked before the exit
    checkpoint = os.path.join(work, "model.pt")
    script = [os.path.abspath(EXAMPLE), "--epochs", "3", "--checkpoint", checkpoint]
    agents = [Job([args.ddprun, "--nproc-per-node", "2", *script], name=f"ddprun on node {n}",
                  env=srun_environment(args.python, n, 2, "127.0.0.[1-2]"))
              for n in range(2)]
    wait_all(agents, deadline, f"torch {version}: the 2-node Slurm job")
    out = "".join(a.output for a in agents)
    err = "".join(a.errors for a in agents)
    codes = [a.returncode for a in agents]
    if codes != [0, 0]:
        sys.exit(f"FAIL: the agents exited {codes}:\n{out}\n{err}")
    port = 20000 + 10 * (JOB % 1000)
    for n, agent in enumerate(agents):
        note = (f"ddprun: note: Slurm step {JOB}.0: node {n} of 2, store on 127.0.0.1:{port} "
                f"(the first host of SLURM_STEP_NODELIST '127.0.0.[1-2]', hosted by node 0; port "
                f"from the job and step ids), run id slurm-{JOB}.0")
        if note not in agent.errors.splitlines():
            sys.exit(f"FAIL: node {n} did not say the Slurm line {note!r}:\n{agent.errors}")
    ranks = sorted(int(r) for r in re.findall(r"^\[default\d\]:rank (\d) \(local \d\): parameters",
                                              out, re.M))
    if ranks != [0, 1, 2, 3]:
        sys.exit(f"FAIL: ranks seen {ranks}, expected 0..3:\n{out}")
    ok = re.search(r"^\[default0\]:OK: loss ([0-9.]+) -> ([0-9.]+); all 4 ranks hold identical",
                   out, re.M)
    if not ok or not re.search(r"^\[default0\]:training on 4 ranks", out, re.M):
        sys.exit(f"FAIL: rank 0 did not train on WORLD_SIZE 4:\n{out}")
    # Node 0 hosts ranks 0 and 1 (it has the lower address), node 1 ranks 2 and 3.
    node1 = re.findall(r"^\[default\d\]:rank (\d) ", agents[1].output, re.M)
    if sorted(node1) != ["2", "3"]:
        sys.exit(f"FAIL: node 1 ran ranks {node1}, expected 2 and 3:\n{agents[1].output}")
    print(f"torch {version}: 2 Slurm nodes, no rendezvous flags: ranks 0..3, WORLD_SIZE 4, loss "
          f"{ok.group(1)} -> {ok.group(2)}, store on 127.0.0.1:{port}, run id slurm-{JOB}.0")
    return 0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ddprun", required=True)
    parser.add_argument("--python", default="/usr/bin/python3")
    parser.add_argument("--scenario", choices=["ddp", "double-task", "no-step", "port-taken"],
                        required=True)
    parser.add_argument("--timeout", type=float, default=150)
    args = parser.parse_args()
    deadline = Deadline(args.timeout)
    command = [args.ddprun, "--nproc-per-node", "2", os.path.abspath(EXAMPLE)]
    if args.scenario == "ddp":
        return ddp(args, deadline)
    if args.scenario == "double-task":
        for node in (0, 1):
            env = srun_environment(args.python, node, 2, "127.0.0.[1-2]", tasks_per_node="2")
            job = run(command, deadline.cap(60), name=f"ddprun, task 0 of node {node}", env=env)
            expect_exit_2(job, ["more than one task on a node", "srun --ntasks-per-node=1 ddprun"],
                          f"two tasks per node, node {node}")
        return 0
    if args.scenario == "no-step":
        env = clean_environment(args.python)
        env.update({"SLURM_JOB_ID": str(JOB), "SLURM_NODEID": "0", "SLURM_NNODES": "2",
                    "SLURM_JOB_NODELIST": "127.0.0.[1-2]", "SLURM_TASKS_PER_NODE": "1(x2)"})
        job = run(command, deadline.cap(60), name="ddprun in the batch script", env=env)
        expect_exit_2(job, ["outside a job step", "srun --ntasks-per-node=1 ddprun"],
                      "a Slurm job without a step")
        return 0
    # port-taken: a listening socket on a port in 20000..29999, and the job and step ids that
    # derive it.
    for port in range(20000 + 10 * (os.getpid() % 1000), 30000):
        holder = socket.socket()
        try:
            holder.bind(("127.0.0.1", port))
            break
        except OSError:
            holder.close()
    else:
        sys.exit("FAIL: no free port in 20000..29999 to hold")
    holder.listen(1)
    job_id, step = 7000 + (port - 20000) // 10, (port - 20000) % 10
    env = srun_environment(args.python, 0, 1, "127.0.0.1", job=job_id, step=step)
    job = run(command, deadline.cap(60), name="ddprun with its port taken", env=env)
    holder.close()
    expect_exit_2(job, [f"127.0.0.1:{port}", "the port is taken",
                        f"derived from Slurm job {job_id} step {step}", "DDPRUN_SLURM_PORT"],
                  "the derived port taken")
    return 0


if __name__ == "__main__":
    sys.exit(main())
