"""The α–β model's prediction error: fit on 2 nodes, predict 3 and 4, measure them.

Runs the bench workload on compose labs of 2, 3 and 4 nodes x 1 process whose
every link is shaped (--link, default 100mbit: well below what 2 shared cores
push through a veth, so the time is the link's, not the CPU's), fits each op's
α and B on the 2-node sweep (workloads/_costmodel.py), predicts the other world
sizes and compares with what they measured. Two models: gloo's algorithms as
labctl models them (what `labctl predict` uses for a gloo run), and nccl-tests'
ring model (PERFORMANCE.md), to show where gloo departs from it.

    python benchmarks/netmodel.py [--link 100mbit] [--nodes 2,3,4] [--image labctl-cpu:latest]
    python benchmarks/netmodel.py --runs runs/a,runs/b,runs/c     # reuse run folders
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

from _harness import labctl, scratch, table, write_lab

from labctl.rundir import RunDir
from workloads import _costmodel as cm
from workloads._report import bench

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all",
       "pingpong", "ring")


def run_lab(folder, nodes: int, link: str, options: dict, image: str | None) -> RunDir:
    lab = write_lab(folder, name=f"netmodel{nodes}", backend="compose", nodes=nodes, nproc_per_node=1,
                    links=link, timeout=1800, workloads=[{"name": "bench", "options": options}],
                    **({"image": image} if image else {}))
    out = folder / f"run-{nodes}"
    started = time.perf_counter()
    done, _ = labctl("up", "-f", str(lab), "--out", str(out), "-q", timeout=1900)
    if done.returncode != 0:
        raise SystemExit(f"the {nodes}-node lab failed: {done.stderr.strip()[-800:]}")
    print(f"<!-- {nodes} nodes: {time.perf_counter() - started:.0f} s, {out} -->", flush=True)
    return RunDir.open(out)


def errors(fit: cm.Fit, measured: list[dict], n: int) -> list[float]:
    return [cm.relative_error(fit.at(n, r["size_bytes"]).seconds, r["time_us_median"] / 1e6)
            for r in measured]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--link", default="100mbit", help="every node's link (--link of the labs)")
    parser.add_argument("--nodes", default="2,3,4", help="world sizes; the first is fitted")
    parser.add_argument("--runs", help="comma list of run folders to read instead of running labs")
    parser.add_argument("--min-bytes", type=int, default=65536)
    parser.add_argument("--max-bytes", type=int, default=4 << 20)
    parser.add_argument("--factor", type=int, default=4)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--image", help="the labs' image (default: labctl-cpu:latest)")
    args = parser.parse_args()
    if args.runs:
        runs = [RunDir.open(p) for p in args.runs.split(",")]
    else:
        folder = scratch()
        options = {"min_bytes": args.min_bytes, "max_bytes": args.max_bytes, "factor": args.factor,
                   "iters": args.iters, "warmup_iters": 1}
        runs = [run_lab(folder, int(n), args.link, options, args.image) for n in args.nodes.split(",")]
    data = {r.status["world_size"]: bench.rows(r.results()) for r in runs}
    first, *others = list(data)
    fits = {name: cm.fits(data[first], model) for name, model in cm.MODELS.items()}

    def cells(name: str, op: str, n: int, largest_only: bool = False) -> list[str]:
        fit, mine = fits[name].get(op), [r for r in data[n] if r["op"] == op]
        if fit is None or not mine:
            return [""] if largest_only else ["", "", ""]
        errs = errors(fit, mine, n)
        at_largest = f"{100 * errs[-1]:+.0f} %"
        if largest_only:
            return [at_largest]
        worst = max(errs, key=abs)
        return [at_largest, f"{100 * statistics.median(abs(e) for e in errs):.0f} %", f"{100 * worst:+.0f} %"]

    sizes = sorted({r["size_bytes"] for r in data[first]})
    print(f"Fit at n = {first} ({runs[0].path}); error = (predicted - measured) / measured, per size "
          f"({sizes[0]} to {sizes[-1]} B): at the largest size, the median of |error| over the "
          "sizes, and the worst\n")
    print(table(["op", "gloo algorithm (labctl's model)",
                 *(f"n = {n}: {what}" for n in others for what in ("largest", "median", "worst"))],
                ([op, cm.MODELS["gloo"][op].name, *(c for n in others for c in cells("gloo", op, n))]
                 for op in OPS)))
    print("\nThe same fit with nccl-tests' ring model (PERFORMANCE.md) for every op, at the largest size:\n")
    print(table(["op", "ring model", *(f"n = {n}" for n in others)],
                ([op, cm.MODELS["nccl"][op].name, *(c for n in others for c in cells("nccl", op, n, True))]
                 for op in OPS)))
    fitted = fits["gloo"]
    print("\n" + table(["op", f"α at n = {first} (us)", "B (MB/s)", "fit error rms"],
                       ([op, f"{f.alpha_s * 1e6:.0f}", f"{f.bandwidth_Bps / 1e6:.2f}", f"{100 * f.rms_error:.1f} %"]
                        for op, f in fitted.items())))
    print(json.dumps({"runs": [str(r.path) for r in runs]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
