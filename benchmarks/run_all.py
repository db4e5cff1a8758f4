"""`make bench`: run every benchmark, print its table, exit 1 if one of them crashed.

Each script runs in its own process so one failure does not hide the others;
a missed target is reported in the tables, not as a failure (this machine is
shared and noisy: read the ratios, each measured within one script run).

    python benchmarks/run_all.py [--quick] [--only scale,link]
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# script, full arguments, --quick arguments (a smoke run in a couple of minutes)
BENCHMARKS = (
    ("scale.py", [], []),
    ("bringup.py", ["--reps", "7"], ["--reps", "2"]),
    ("harness_overhead.py", ["--rounds", "7", "--iters", "20", "--reps", "2"],
     ["--rounds", "3", "--iters", "5", "--reps", "1", "--max-bytes", "4194304", "--factor", "4"]),
    ("link.py", [], ["--seconds", "1", "--max-bytes", "8388608", "--iters", "3"]),
    ("memory.py", [], ["--sizes", "1,100"]),
    ("k8s_logs.py", ["--sizes", "1,100,1024", "--old"], ["--sizes", "1,100"]),
    ("html_report.py", [], ["--loads", "1", "--ops", "20000"]),
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions and smaller sizes")
    parser.add_argument("--only", help="comma-separated script names without .py")
    args = parser.parse_args()
    only = set(args.only.split(",")) if args.only else None
    failed = []
    for script, full, quick in BENCHMARKS:
        if only and script[:-3] not in only:
            continue
        argv = [sys.executable, str(HERE / script), *(quick if args.quick else full)]
        print(f"<!-- {' '.join(argv[1:])} -->", flush=True)
        started = time.perf_counter()
        done = subprocess.run(argv, cwd=HERE.parent)
        print(f"<!-- {script}: exit {done.returncode}, {time.perf_counter() - started:.0f} s -->\n",
              flush=True)
        if done.returncode != 0:
            failed.append(script)
    if failed:
        print(f"error: benchmark(s) failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
