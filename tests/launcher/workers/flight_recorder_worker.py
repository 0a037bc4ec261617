"""A stand-in for an NCCL rank with PyTorch's Flight Recorder on, for
tests/launcher/flight_recorder_test.py (no GPU, no torch): it makes and reads its dump pipe as
torch's DumpPipe does (ProcessGroupNCCL.hpp: unlink, mkfifo "<TORCH_NCCL_DEBUG_INFO_PIPE_FILE><rank>.pipe"
0666, open O_RDONLY|O_NONBLOCK, a read at every poll of its monitor thread) and, after a read,
writes its dump to "<TORCH_NCCL_DEBUG_INFO_TEMP_FILE><rank>" as torch does (the file created,
then written). Rank 1 reports progress a few times, then stops (the hang); rank 0 goes on.

  flight_recorder_worker.py dump       every rank reads its pipe and dumps
  flight_recorder_worker.py no-reader  every rank makes its FIFO but never opens it (a process
                                       group that is not NCCL has no reader)

Each rank records what happened, with epoch times, in $FR_RECORD_DIR/rank<rank>.txt: "read T"
when a request came, "dumped T" once its dump is written.
"""
import os
import pickle
import sys
import threading
import time

RANK = int(os.environ["RANK"])
MODE = sys.argv[1]
FOREVER = 3600
POLL = 0.2  # torch polls every TORCH_NCCL_COORD_CHECK_MILSEC (1 s); faster here


def record(what):
    with open(os.path.join(os.environ["FR_RECORD_DIR"], f"rank{RANK}.txt"), "a") as out:
        out.write(f"{what} {time.time():.6f}\n")


def report_progress():
    beat = os.environ.get("DDPRUN_HEARTBEAT_FILE")
    if beat:
        os.utime(beat)


def serve_pipe(fd, dump):
    while True:
        time.sleep(POLL)
        try:
            data = os.read(fd, 128)
        except BlockingIOError:
            continue
        if data:
            record("read")
            with open(dump, "wb") as out:
                out.write(pickle.dumps({"rank": RANK, "entries": [{"profiling_name": "nccl:all_reduce"}] * 500}))
            record("dumped")


def stop_reporting_and_wait():
    time.sleep(FOREVER)


def main():
    pipe = f"{os.environ['TORCH_NCCL_DEBUG_INFO_PIPE_FILE']}{RANK}.pipe"
    dump = f"{os.environ['TORCH_NCCL_DEBUG_INFO_TEMP_FILE']}{RANK}"
    try:
        os.unlink(pipe)
    except FileNotFoundError:
        pass
    os.mkfifo(pipe, 0o666)
    if MODE == "dump":
        fd = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)
        threading.Thread(target=serve_pipe, args=(fd, dump), daemon=True).start()
    record("ready")
    for _ in range(5):
        report_progress()
        time.sleep(0.1)
    if RANK == 1:
        stop_reporting_and_wait()
    while True:
        report_progress()
        time.sleep(0.1)


if __name__ == "__main__":
    sys.exit(main())
