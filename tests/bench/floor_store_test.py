#!/usr/bin/python3
"""The floor store (ddprun-store-bench --serve-floor) answers what the benchmark sends, in both
dialects, so that a benchmark run never fails on its anchor. Correctness only: nothing is timed.

Usage: floor_store_test.py BUILD_DIR/tests/bench/ddprun-store-bench
"""
import json
import subprocess
import sys


def main():
    bench = sys.argv[1]
    floor = subprocess.Popen([bench, "--serve-floor"], stdout=subprocess.PIPE, text=True)
    try:
        line = floor.stdout.readline()  # the floor prints it before anything else, or exits
        if not line.startswith("listening on "):
            sys.exit(f"floor store did not start: {line!r}")
        port = line.strip().rsplit(":", 1)[1]
        for dialect in ("torch113", "torch2"):
            out = subprocess.run([bench, "--port", port, "--dialect", dialect, "--mode", "ops",
                                  "--engine", "threads", "--clients", "3", "--rounds", "20"],
                                 capture_output=True, text=True, timeout=60)
            if out.returncode != 0:
                sys.exit(f"{dialect}: the benchmark failed against the floor store: {out.stderr}")
            result = json.loads(out.stdout.strip().splitlines()[-1])
            if result["ops"] != 3 * 3 * 20:
                sys.exit(f"{dialect}: expected 180 ops, got {result}")
            print(f"{dialect}: {result['ops']:.0f} ops answered")
    finally:
        floor.kill()
        floor.wait(timeout=10)


if __name__ == "__main__":
    main()
