"""The worker of tests/bench/bench_hang.py (standard library only, except torch's FileTimer client
where asked).

  hang_probe.py recover OUT MODE     MODE: heartbeat | filetimer. Attempt 0: every rank reports
      progress every 50 ms; after 1 s rank 1 writes "hang <epoch>" to OUT and hangs (heartbeat:
      stops reporting; filetimer: inside expires(after=2)). Attempt 1: each rank writes
      "start <epoch>" to OUT and exits 0.
  hang_probe.py reports N MODE       MODE: heartbeat | filetimer | none. Makes N progress reports
      (heartbeat: os.utime; filetimer: FileTimerClient acquire + release = 2 requests per report;
      none: the same loop, reporting nothing) and prints the agent's (its parent's) CPU seconds
      before and after, and its own time per report.
"""
import os
import sys
import time


def agent_cpu():
    with open(f"/proc/{os.getppid()}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    # utime and stime (fields 14 and 15 of stat; here after the ")", from 0: 11 and 12): the
    # agent's own, not its children's.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def file_timer_client():
    from torch.distributed.elastic.timer import FileTimerClient
    return FileTimerClient(os.environ["TORCHELASTIC_TIMER_FILE"])


def main():
    what, rank = sys.argv[1], int(os.environ["RANK"])
    if what == "recover":
        out, mode = sys.argv[2], sys.argv[3]
        if int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) > 0:
            with open(out, "a") as f:
                f.write(f"start {time.time()}\n")
            return 0
        beat = os.environ.get("DDPRUN_HEARTBEAT_FILE")
        client = file_timer_client() if mode == "filetimer" else None
        began = time.monotonic()
        while True:
            if beat:
                os.utime(beat)
            if rank == 1 and time.monotonic() - began > 1:
                with open(out, "a") as f:
                    f.write(f"hang {time.time()}\n")
                if client is not None:
                    from torch.distributed.elastic.timer import configure, expires
                    configure(client)
                    with expires(after=2):
                        time.sleep(3600)
                time.sleep(3600)
            time.sleep(0.05)
    if what == "reports":
        count, mode = int(sys.argv[2]), sys.argv[3]
        beat = os.environ.get("DDPRUN_HEARTBEAT_FILE")
        client = file_timer_client() if mode == "filetimer" else None
        before = agent_cpu()
        start = time.perf_counter()
        for i in range(count):
            if mode == "heartbeat":
                os.utime(beat)
            elif mode == "filetimer":
                client.acquire("step", time.time() + 600)
                client.release("step")
        took = time.perf_counter() - start
        time.sleep(0.5)  # whatever the agent still has to read
        print(f"agent_cpu {agent_cpu() - before:.3f} worker_us {took / count * 1e6:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
