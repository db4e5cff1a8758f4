"""What tracing (issue 21, workloads/_trace.py) costs, printed as tables.

1. all_reduce busbw with tracing on vs off, in the same torchrun job, interleaved
   round by round (off = the original function, on = the recorder's wrapper, whose
   lines go to a file as a node log would, and "off again", the original once more: the
   harness's own noise in the same job): the ratio on/off at 1 MiB and 64 MiB, from the
   median op time and from the 20th percentile (the op when the OS did not get in its way).
1b. The recorder's own µs per op on one rank (fastest of many batches: what the
   wrapper adds, with the machine's load mostly filtered out).
2. A script doing N small all_reduces (default 100,000) through `labctl up --trace`
   and without: run time, trace records' size in the rank logs, trace.json size,
   merge time and the merge's peak memory (a fresh process; also at N/10, to show
   it stays flat: the merge is streamed).

    python benchmarks/trace.py                 # 2 ranks, 1 MiB and 64 MiB, 100,000 ops
    python benchmarks/trace.py --ops 20000 --nproc 2
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _harness import REPO, labctl, table  # noqa: E402

SIZES = (1 << 20, 64 << 20)


def worker(sizes: list[int], iters: int) -> None:
    """Inside torchrun: rounds of three arms per size, their order rotating: off (the
    original function), off again (an A/A arm: the harness's own noise, same job) and on
    (the recorder's wrapper); rank 0 prints one TRACEBENCH line to stderr."""
    os.environ["LAB_TRACE"] = "1"
    from workloads import _trace

    _trace.install()
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    traced = dist.all_reduce
    plain = traced.__wrapped__
    arms = {"off": plain, "off again": plain, "on": traced}
    n = dist.get_world_size()
    out = {}
    for size in sizes:
        t = torch.zeros(size // 4, dtype=torch.float32)
        for fn in (plain, traced, plain, traced):          # warm up both
            fn(t)
        times: dict[str, list[float]] = {name: [] for name in arms}
        rounds = iters if size < (16 << 20) else max(3, iters // 10)
        names = list(arms)
        for i in range(rounds):
            for name in names[i % 3:] + names[:i % 3]:       # no arm always first
                plain(torch.zeros(1))                        # a barrier that is never traced
                started = time.perf_counter()
                arms[name](t)
                elapsed = torch.tensor([time.perf_counter() - started], dtype=torch.float64)
                plain(elapsed, op=dist.ReduceOp.MAX)         # the op's time is its slowest rank's
                times[name].append(float(elapsed.item()))
        result = {"rounds": rounds}
        for name, values in times.items():
            values.sort()
            result[name] = {"median": 2 * (n - 1) / n * size / statistics.median(values) / 1e9,
                            "p20": 2 * (n - 1) / n * size / values[len(values) // 5] / 1e9}
        out[str(size)] = result
    if dist.get_rank() == 0:
        print("TRACEBENCH " + json.dumps(out), file=sys.stderr, flush=True)
    dist.destroy_process_group()


SMALL = """
import sys, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1)
for _ in range({ops}):
    dist.all_reduce(t)
dist.destroy_process_group()
"""

MERGE = """
import json, resource, sys, time
from labctl import trace
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.perf_counter()
s = trace.merge(sys.argv[1], world=int(sys.argv[2]))
print(json.dumps({"seconds": time.perf_counter() - started, "ops": s.ops,
                  "peak_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "base_kib": base}))
"""


FR_MICRO = """
import os, sys, time, torch, torch.distributed as dist
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + sys.argv[1], rank=0, world_size=1)
t = torch.ones(1)
for _ in range(2000):
    dist.all_reduce(t)
started = time.perf_counter()
for _ in range({ops}):
    dist.all_reduce(t)
print((time.perf_counter() - started) / {ops} * 1e6)
"""


def flight_recorder_table(ops: int = 20000, rounds: int = 3) -> str:
    """The Flight Recorder ring the ranks leave on (TORCH_FR_BUFFER_SIZE): µs per op on one
    rank, a 1-float all_reduce (the op itself nearly free), jobs alternating off and on."""
    import socket

    times: dict[str, list[float]] = {"0": [], "2000": []}
    for _ in range(rounds):
        for size in times:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            done = subprocess.run([sys.executable, "-c", FR_MICRO.format(ops=ops), str(port)],
                                  capture_output=True, text=True, timeout=600,
                                  env={**os.environ, "TORCH_FR_BUFFER_SIZE": size})
            times[size].append(float(done.stdout.strip().splitlines()[-1]))
    off, on = statistics.median(times["0"]), statistics.median(times["2000"])
    return table(("TORCH_FR_BUFFER_SIZE", "µs per all_reduce (median of jobs)", "jobs"),
                 [("0 (off)", f"{off:.1f}", rounds), ("2000 (labctl's default)", f"{on:.1f}", rounds),
                  ("difference", f"{on - off:+.1f}", "")])


def busbw_table(nproc: int, iters: int) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "node.log"
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        with open(log, "w") as f:
            done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                                   f"--nproc-per-node={nproc}", __file__, "--worker",
                                   "--iters", str(iters)], stdout=f, stderr=subprocess.PIPE,
                                  text=True, env=env, cwd=tmp, timeout=1800)
        line = next((x for x in done.stderr.splitlines() if x.startswith("TRACEBENCH ")), None)
        if line is None:
            raise SystemExit(f"the busbw job printed no result:\n{done.stderr[-2000:]}")
        data = json.loads(line.split(" ", 1)[1])
    rows = []
    for size, d in data.items():
        for stat in ("median", "p20"):
            off, again, on = d["off"][stat], d["off again"][stat], d["on"][stat]
            rows.append((f"{int(size) >> 20} MiB", stat, d["rounds"], f"{off:.3f}", f"{again:.3f}",
                         f"{on:.3f}", f"{again / off:.3f}", f"{on / off:.3f}"))
    return table(("size", "statistic of the op times", "rounds", "busbw off GB/s", "off again",
                  "on", "off again/off (noise)", "on/off"), rows)


RECORDER_MICRO = """
import os, sys, tempfile, time
os.environ["LAB_TRACE"] = "1"
from workloads import _trace
_trace.install()
import torch, torch.distributed as dist
dist.init_process_group("gloo", init_method="file://" + tempfile.mktemp(), rank=0, world_size=1)
traced = dist.all_reduce
plain = traced.__wrapped__
t = torch.ones(1)
best = {{"off": 1e9, "on": 1e9}}
for r in range({batches}):
    for name, fn in ((("off", plain), ("on", traced)) if r % 2 else (("on", traced), ("off", plain))):
        started = time.perf_counter()
        for _ in range(300):
            fn(t)
        best[name] = min(best[name], (time.perf_counter() - started) / 300 * 1e6)
print(best["off"], best["on"], file=sys.stderr)
"""


def recorder_table(jobs: int = 3, batches: int = 30) -> str:
    """The recorder's own time per op, robust to a loaded machine: one rank, a 1-float
    all_reduce, batches of 300 alternating plain and traced, the fastest batch of each
    (its lines go to a file, as a node log's would)."""
    costs, rows = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for job in range(jobs):
            with open(Path(tmp) / "out.log", "w") as out:
                done = subprocess.run([sys.executable, "-c", RECORDER_MICRO.format(batches=batches)],
                                      stdout=out, stderr=subprocess.PIPE, text=True, timeout=600, cwd=REPO,
                                      env={**os.environ, "PYTHONPATH": str(REPO)})
            off, on = map(float, done.stderr.strip().splitlines()[-1].split())
            costs.append(on - off)
            rows.append((job + 1, f"{off:.1f}", f"{on:.1f}", f"{on - off:.1f}"))
    rows.append(("median", "", "", f"{statistics.median(costs):.1f}"))
    return table(("job", "µs per all_reduce, plain", "traced", "recorder µs per op"), rows)


def small_ops_table(ops: int, nproc: int) -> str:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n, traced in ((ops, False), (ops, True), (max(1, ops // 10), True)):
            script = Path(tmp) / f"small-{n}.py"
            script.write_text(SMALL.format(ops=n))
            out = Path(tmp) / f"run-{n}-{int(traced)}"
            done, seconds = labctl("up", "--script", str(script), "--nodes", "1",
                                   "--nproc-per-node", str(nproc), "--trace" if traced else "--no-trace",
                                   "--out", str(out), "--timeout", "1800", timeout=1900)
            if done.returncode != 0:
                raise SystemExit(f"labctl up failed: {done.stdout[-1500:]}{done.stderr[-1500:]}")
            if not traced:
                rows.append((n, "off", f"{seconds:.1f}", "", "", "", ""))
                continue
            record_bytes = sum(sum(len(x) for x in p.open("rb") if b"@@labctl-trace " in x)
                               for p in (out / "ranks").glob("rank-*.log"))
            merged = subprocess.run([sys.executable, "-c", MERGE, str(out), str(nproc)], capture_output=True,
                                    text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
            m = json.loads(merged.stdout)
            rows.append((n, "on", f"{seconds:.1f}", f"{record_bytes / 1e6:.1f}",
                         f"{(out / 'trace.json').stat().st_size / 1e6:.1f}", f"{m['seconds']:.2f}",
                         f"{m['peak_kib'] / 1024:.1f} ({m['base_kib'] / 1024:.1f})"))
    return table(("ops per rank", "trace", "labctl up s", "records MB (rank logs)", "trace.json MB",
                  "merge s", "merge peak RSS MiB (after imports)"), rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--iters", type=int, default=300, help="rounds at 1 MiB (64 MiB: a tenth)")
    parser.add_argument("--ops", type=int, default=100_000)
    parser.add_argument("--skip-busbw", action="store_true")
    parser.add_argument("--skip-ops", action="store_true")
    parser.add_argument("--skip-fr", action="store_true")
    parser.add_argument("--skip-recorder", action="store_true")
    args = parser.parse_args()
    if args.worker:
        worker(list(SIZES), args.iters)
        return
    if not args.skip_busbw:
        print("## all_reduce busbw, tracing on vs off (same job, interleaved rounds, median)\n")
        print(busbw_table(args.nproc, args.iters) + "\n")
    if not args.skip_recorder:
        print("## the recorder's own cost per op (one rank, fastest batch of 300)\n")
        print(recorder_table() + "\n")
    if not args.skip_fr:
        print("## Flight Recorder ring left on (every rank, tracing on or off)\n")
        print(flight_recorder_table() + "\n")
    if not args.skip_ops:
        print(f"## {args.ops} small all_reduces per rank: run time, trace size, merge\n")
        print(small_ops_table(args.ops, args.nproc) + "\n")


if __name__ == "__main__":
    main()
