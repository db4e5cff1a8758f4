"""Harness overhead: the lab's all_reduce busbw against a bare torch.distributed loop.

Both run with the same world size on the same machine, launched the same way
(the lab with `labctl up --workload bench`, the bare loop with the very
argv/env of `labctl render plan --script benchmarks/bare_allreduce.py`), in
alternation within one invocation, timed the same way (barrier, one call,
slowest rank, median). Ratio = lab busbw / bare busbw (target >= 0.95).

    python benchmarks/harness_overhead.py [--reps 3] [--iters 10] [--min-bytes 1048576 --max-bytes 67108864 --factor 64]
"""
from __future__ import annotations

import argparse
import json
import shutil

from _harness import labctl, median, render_plan, run_by_hand, scratch, table, write_lab

from labctl.bench import busbw_GBps, sizes
from labctl.rundir import RunDir

TARGET = 0.95


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--nproc-per-node", type=int, default=2)
    parser.add_argument("--min-bytes", type=int, default=1 << 20)
    parser.add_argument("--max-bytes", type=int, default=64 << 20)
    parser.add_argument("--factor", type=int, default=64)
    args = parser.parse_args()
    args.sizes = sizes(args.min_bytes, args.max_bytes, args.factor)
    n = args.nodes * args.nproc_per_node
    folder = scratch()
    lab_bw: dict[int, list[float]] = {s: [] for s in args.sizes}
    bare_bw: dict[int, list[float]] = {s: [] for s in args.sizes}
    try:
        for rep in range(args.reps):
            spec = write_lab(folder, name="overhead", nodes=args.nodes,
                             nproc_per_node=args.nproc_per_node, timeout=900, workloads=[{
                                 "name": "bench", "options": {
                                     "ops": ["all_reduce"], "min_bytes": args.min_bytes,
                                     "max_bytes": args.max_bytes, "factor": args.factor,
                                     "iters": args.iters, "warmup_iters": args.warmup, "link": False}}])
            out = folder / f"lab-{rep}"
            done, _ = labctl("up", "-f", str(spec), "-q", "--out", str(out))
            if done.returncode != 0:
                raise SystemExit(f"labctl up failed: {done.stderr.strip()[-2000:]}")
            for row in RunDir.open(out).results():
                if row.get("name") == "all_reduce":
                    lab_bw[row["size_bytes"]].append(row["busbw_GBps"])
            plan = render_plan("--nodes", str(args.nodes), "--nproc-per-node", str(args.nproc_per_node),
                               "--script", "benchmarks/bare_allreduce.py", "--",
                               *map(str, args.sizes), "--iters", str(args.iters),
                               "--warmup", str(args.warmup))
            _, outputs = run_by_hand(plan, timeout=900)
            line = next(x for out in outputs for x in out.splitlines() if "BARE " in x)
            for size, seconds in json.loads(line.split("BARE ", 1)[1]).items():
                bare_bw[int(size)].append(busbw_GBps("all_reduce", int(size), seconds, n))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"## Harness overhead: lab all_reduce busbw vs bare torch.distributed loop "
          f"({args.nodes}x{args.nproc_per_node} gloo, local, {args.iters} iters, {args.reps} reps)\n")
    rows = []
    for size in args.sizes:
        lab, bare = median(lab_bw[size]), median(bare_bw[size])
        ratio = lab / bare if bare else float("nan")
        rows.append([f"{size >> 20} MiB", f"{lab:.3f}", f"{bare:.3f}", f"{ratio:.3f}",
                     "met" if ratio >= TARGET else "MISSED",
                     " ".join(f"{x:.3f}" for x in lab_bw[size]), " ".join(f"{x:.3f}" for x in bare_bw[size])])
    print(table(["size", "lab busbw (GB/s, median)", "bare busbw (GB/s, median)", "lab/bare",
                 f"target >= {TARGET}", "lab, every rep", "bare, every rep"], rows))
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
