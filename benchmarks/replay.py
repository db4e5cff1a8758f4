"""How well `labctl predict` replays: fit on 2 compose nodes, predict 3 and 4, measure them.

Compose labs of N nodes x 1 process, every link shaped (tc, docs/network.md) well below
what 2 shared cores push through a veth, so that the time is the links':

- the fit: 2 nodes, every link at --link (100mbit), the bench from 16 KiB to 4 MiB;
- the targets: 3 and 4 nodes with every link at --link ("uniform"), and 3 and 4 nodes
  whose last node is at --slow (50mbit; "slow node"), the bench at 1 and 4 MiB.

Each target is predicted from the fit alone (`labctl predict FIT --world-size N --link ...`
with the target's links: labctl/reports/benchpredict.py `predict`, the replay of each op's
gloo messages), and compared with what it measured. Printed: per op, size and lab the
predicted and measured times and the error, then per op the worst |error| at 3 and 4
nodes and the median; the α–β closed form fitted per op on the same 2-node run (what
`labctl predict` did before) beside it on the uniform labs.

    python benchmarks/replay.py [--image labctl-cpu:latest] [--link 100mbit] [--slow 50mbit]
    python benchmarks/replay.py --runs FIT,T3U,T4U,T3S,T4S        # reuse run folders
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from _harness import labctl, table, write_lab

from labctl.rundir import RunDir
from workloads import _costmodel as cm
from labctl.reports import benchpredict
from workloads._report import bench

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all", "pingpong", "ring")
MiB = 1 << 20
BAR_WORST, BAR_MEDIAN = 0.15, 0.10


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def run_lab(folder, name: str, nodes: int, links, options: dict, image: str | None) -> RunDir:
    lab = write_lab(folder, name=name, backend="compose", nodes=nodes, nproc_per_node=1, links=links,
                    timeout=1800, workloads=[{"name": "bench", "options": options}],
                    **({"image": image} if image else {}))
    out = folder / name
    started = time.perf_counter()
    done, _ = labctl("up", "-f", str(lab), "--out", str(out), "-q", timeout=1900)
    if done.returncode != 0:
        raise SystemExit(f"the {name} lab failed: {done.stderr.strip()[-800:]}")
    print(f"<!-- {name}: {nodes} nodes, links {json.dumps(links)}: {time.perf_counter() - started:.0f} s, "
          f"load {load()}, {out} -->", flush=True)
    return RunDir.open(out)


def links_of(run: RunDir) -> dict:
    """The target lab's `links:` as --link overrides (what `labctl predict --link` takes)."""
    raw = json.loads(bench.environment(run.results()).get("links") or "{}")
    data = benchpredict.links_data(raw)
    return {k: ({int(n) if k == "nodes" else n: v for n, v in data[k].items()} if isinstance(data[k], dict)
                else data[k]) for k in data}


def calls_us(run: RunDir) -> dict[tuple[str, int], list[float]]:
    """(op, size) -> each timed call's time (the slowest rank's), as the lowest rank recorded them."""
    out: dict[tuple[str, int], tuple[int, list[float]]] = {}
    for r in run.results():
        if r.get("workload") == "bench" and r.get("name") in OPS and r.get("times_us"):
            key, rank = (r["name"], r["size_bytes"]), r.get("rank", 0)
            if key not in out or rank < out[key][0]:
                out[key] = (rank, r["times_us"])
    return {k: v for k, (_, v) in out.items()}


def measured_ms(row: dict, statistic: str, calls: dict[tuple[str, int], list[float]]) -> float:
    """A target's measured time: the median of its calls (the bench's table), or their
    mean; a row whose calls were not recorded has its median only."""
    times = calls.get((row["op"], row["size_bytes"]))
    if statistic == "mean" and times:
        return statistics.mean(times) / 1e3
    return row["time_us_median"] / 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--link", default="100mbit", help="every node's link")
    parser.add_argument("--slow", default="50mbit", help="the slow node's link (the last node)")
    parser.add_argument("--runs", help="FIT,T3U,T4U,T3S,T4S: run folders to read instead of running labs")
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--statistic", choices=("median", "mean"), default="mean",
                        help="what a target's measured time is, for the bar: the mean of its calls (the "
                             "default: what the replay predicts, an expected time, for all_to_all the "
                             "mean over the ways a call may go; nccl-tests' time is a mean too) or their "
                             "median (the bench's table); the other is printed beside it")
    parser.add_argument("--image", help="the labs' image (default: labctl-cpu:latest)")
    parser.add_argument("--out", help="where the run folders go (default: a fresh folder in /tmp)")
    args = parser.parse_args()
    print(f"<!-- load at start {load()} -->", flush=True)
    if args.runs:
        fit_run, *targets = [RunDir.open(p) for p in args.runs.split(",")]
    else:
        import tempfile
        from pathlib import Path

        folder = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="replay-"))
        folder.mkdir(parents=True, exist_ok=True)
        sweep = {"min_bytes": 16 << 10, "max_bytes": 4 * MiB, "factor": 4, "iters": args.iters,
                 "warmup_iters": 1, "link": False}
        targets_opts = {**sweep, "min_bytes": MiB}
        fit_run = run_lab(folder, "fit2", 2, args.link, sweep, args.image)
        targets = [run_lab(folder, f"uniform{n}", n, args.link, targets_opts, args.image) for n in (3, 4)]
        targets += [run_lab(folder, f"slow{n}", n, {"default": args.link, "nodes": {n - 1: args.slow}},
                            targets_opts, args.image) for n in (3, 4)]
    fit_results = fit_run.results()
    fitted, family, _ = benchpredict.replay_fit(fit_results)
    closed = cm.fits(bench.rows(fit_results), cm.MODELS["gloo"])
    print(f"\nFit on {fit_run.path} (n = 2): α = {fitted.alpha_s * 1e6:.0f} us per message, links x "
          f"{fitted.efficiency:.3f}, on the {fitted.source} (rms {100 * fitted.rms_error:.1f} %)\n")
    rows, errors, other_errors = [], {}, {}
    other = "median" if args.statistic == "mean" else "mean"
    for target in targets:
        data, calls = bench.rows(target.results()), calls_us(target)
        n = data[0]["world_size"]
        overrides = links_of(target)
        kind = "uniform" if "nodes" not in overrides else "slow node"
        sizes = sorted({r["size_bytes"] for r in data})       # 1 and 4 MiB, in whole elements per rank
        predicted = json.loads(benchpredict.predict(fit_run, n, sizes, "json", links=overrides))
        by = {(r["op"], r["size_bytes"]): r for r in predicted["rows"]}
        for r in data:
            if (r["op"], r["size_bytes"]) not in by:
                continue
            p = by[(r["op"], r["size_bytes"])]["time_us"] / 1e3
            m = measured_ms(r, args.statistic, calls)
            e = (p - m) / m
            errors.setdefault(r["op"], []).append((n, kind, r["size_bytes"], e))
            m2 = measured_ms(r, other, calls)
            e2 = (p - m2) / m2
            other_errors.setdefault(r["op"], []).append(e2)
            old = ""
            if kind == "uniform" and r["op"] in closed:
                old_e = (closed[r["op"]].at(n, r["size_bytes"]).seconds * 1e3 - m) / m
                old = f"{100 * old_e:+.1f} %"
            rows.append([r["op"], n, kind, f"{round(r['size_bytes'] / MiB)} MiB", f"{p:.1f}", f"{m:.1f}",
                         f"{100 * e:+.1f} %", f"{m2:.1f}", f"{100 * e2:+.1f} %", old])
    rows.sort(key=lambda x: (OPS.index(x[0]), x[2], x[1], x[3]))
    print(table(["op", "n", "links", "size", "predicted (ms)", f"measured, {args.statistic} (ms)", "error",
                 f"{other} (ms)", f"error to the {other}", "α–β per-op fit (before)"], rows))
    print("\nPer op, over n = 3 and 4, uniform and slow node, 1 and 4 MiB: the worst and the median |error|\n")
    summary, everything, everything2 = [], [], []
    for op in OPS:
        errs = [abs(e) for *_, e in errors.get(op, [])]
        if not errs:
            continue
        everything += errs
        errs2 = [abs(e) for e in other_errors[op]]
        everything2 += errs2
        summary.append([op, f"{100 * max(errs):.1f} %", f"{100 * statistics.median(errs):.1f} %",
                        "yes" if max(errs) <= BAR_WORST else "no",
                        f"{100 * max(errs2):.1f} %", f"{100 * statistics.median(errs2):.1f} %"])
    print(table(["op", "worst |error|", "median |error|", f"within {100 * BAR_WORST:.0f} %",
                 f"to the {other}: worst", "median"], summary))
    med = statistics.median(everything) if everything else float("nan")
    print(f"\nAll {len(everything)} predictions, against the {args.statistic} of the calls: median |error| "
          f"{100 * med:.1f} % (bar {100 * BAR_MEDIAN:.0f} %), worst {100 * max(everything):.1f} % "
          f"(bar {100 * BAR_WORST:.0f} % per op), {sum(e > BAR_WORST for e in everything)} above "
          f"{100 * BAR_WORST:.0f} %; against the {other}: median {100 * statistics.median(everything2):.1f} %, "
          f"worst {100 * max(everything2):.1f} %, {sum(e > BAR_WORST for e in everything2)} above; "
          f"load at end {load()}")
    print(json.dumps({"runs": [str(fit_run.path)] + [str(t.path) for t in targets]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
