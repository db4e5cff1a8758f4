"""Harness overhead: the lab's all_reduce busbw against a bare torch.distributed loop.

Same world size, same machine, same timing method (barrier, one call,
slowest rank per iteration, median); ratio = lab busbw / bare busbw
(target >= 0.95). Two measurements:

1. same run (the ratio that counts): one lab runs benchmarks/overhead_ab.py,
   which alternates the bench workload's own code path (`bench.Case` +
   `bench.measure`, correctness pass included) with a bare loop in the same
   process group, `--rounds` times, order swapped every round;
2. separate launches (context): `labctl up --workload bench` vs the bare
   loop (benchmarks/bare_allreduce.py) started by hand with the plan's
   argv/env, alternating, `--reps` times. On a busy 2-core machine the
   load drifts between launches, so this spread is mostly the machine's.

    python benchmarks/harness_overhead.py [--rounds 5] [--reps 2] [--iters 10]
           [--min-bytes 1048576 --max-bytes 67108864 --factor 64]
"""
from __future__ import annotations

import argparse
import json
import re
import shutil

from _harness import labctl, median, render_plan, run_by_hand, scratch, table, write_lab

from workloads._report.bench import busbw_GBps, sizes
from labctl.rundir import RunDir

TARGET = 0.95


def same_run(args, folder, n) -> dict[int, tuple[list[float], list[float]]]:
    out = folder / "ab"
    done, _ = labctl("up", "--nodes", str(args.nodes), "--nproc-per-node", str(args.nproc_per_node),
                     "--timeout", "1800", "--script", "benchmarks/overhead_ab.py", "-q", "--out", str(out),
                     "--", *map(str, args.sizes), "--iters", str(args.iters),
                     "--warmup", str(args.warmup), "--rounds", str(args.rounds), timeout=1900)
    log = (out / "nodes" / "node-0.log").read_text()
    found = re.search(r"AB (\{.*\})", log)
    if done.returncode != 0 or not found:
        raise SystemExit(f"same-run A/B failed: {done.stderr.strip()[-1500:]} {log[-1500:]}")
    data = json.loads(found.group(1))
    return {int(s): ([busbw_GBps("all_reduce", int(s), t, n) for t in v["lab"]],
                     [busbw_GBps("all_reduce", int(s), t, n) for t in v["bare"]])
            for s, v in data.items()}


def separate_launches(args, folder, n) -> dict[int, tuple[list[float], list[float]]]:
    lab_bw: dict[int, list[float]] = {s: [] for s in args.sizes}
    bare_bw: dict[int, list[float]] = {s: [] for s in args.sizes}
    for rep in range(args.reps):
        spec = write_lab(folder, name="overhead", nodes=args.nodes, nproc_per_node=args.nproc_per_node,
                         timeout=900, workloads=[{"name": "bench", "options": {
                             "ops": ["all_reduce"], "min_bytes": args.min_bytes,
                             "max_bytes": args.max_bytes, "factor": args.factor, "iters": args.iters,
                             "warmup_iters": args.warmup, "link": False}}])
        out = folder / f"lab-{rep}"
        done, _ = labctl("up", "-f", str(spec), "-q", "--out", str(out))
        if done.returncode != 0:
            raise SystemExit(f"labctl up failed: {done.stderr.strip()[-2000:]}")
        for row in RunDir.open(out).results():
            if row.get("name") == "all_reduce":
                lab_bw[row["size_bytes"]].append(row["busbw_GBps"])
        plan = render_plan("--nodes", str(args.nodes), "--nproc-per-node", str(args.nproc_per_node),
                           "--script", "benchmarks/bare_allreduce.py", "--", *map(str, args.sizes),
                           "--iters", str(args.iters), "--warmup", str(args.warmup))
        _, outputs = run_by_hand(plan, timeout=900)
        line = next(x for o in outputs for x in o.splitlines() if "BARE " in x)
        for size, seconds in json.loads(line.split("BARE ", 1)[1]).items():
            bare_bw[int(size)].append(busbw_GBps("all_reduce", int(size), seconds, n))
    return {s: (lab_bw[s], bare_bw[s]) for s in args.sizes}


def print_table(title: str, data: dict[int, tuple[list[float], list[float]]], unit: str) -> None:
    print(title + "\n")
    rows = []
    for size, (lab, bare) in sorted(data.items()):
        ratio = median(lab) / median(bare) if bare and median(bare) else float("nan")
        rows.append([f"{size / 2**20:g} MiB", f"{median(lab):.3f}", f"{median(bare):.3f}", f"{ratio:.3f}",
                     "met" if ratio >= TARGET else "MISSED",
                     " ".join(f"{x:.3f}" for x in lab), " ".join(f"{x:.3f}" for x in bare)])
    print(table(["size", "lab busbw (GB/s, median)", "bare busbw (GB/s, median)", "lab/bare",
                 f"target >= {TARGET}", f"lab, every {unit}", f"bare, every {unit}"], rows))
    print()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="same-run A/B rounds")
    parser.add_argument("--reps", type=int, default=2, help="separate-launch repetitions (0: skip)")
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
    layout = f"{args.nodes}x{args.nproc_per_node} gloo, local, {args.iters} iters"
    try:
        print_table(f"## Harness overhead, same run: bench workload timing path vs bare loop "
                    f"({layout}, {args.rounds} interleaved rounds)", same_run(args, folder, n), "round")
        if args.reps:
            print_table(f"### Separate launches (context): `labctl up --workload bench` vs bare script "
                        f"by hand ({layout}, {args.reps} reps)", separate_launches(args, folder, n), "rep")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
