"""Bring-up overhead: wall time of `labctl up` vs. the same torchrun agents started by hand.

Both sides run the `barrier` workload on the local backend (2 nodes x 2
processes by default), alternating, `--reps` times each; the ratio of the
medians is what `labctl up` costs on top of torchrun (target <= 1.10).
`labctl up` is timed as a user sees it: a fresh CLI process, from start to
the printed report (spec, plan, run folder, polling, log split, report).

    python benchmarks/bringup.py [--reps 5] [--nodes 2] [--nproc-per-node 2]
"""
from __future__ import annotations

import argparse
import json
import shutil

from _harness import labctl, median, render_plan, run_by_hand, scratch, table

TARGET = 1.10


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--nodes", default="2")
    parser.add_argument("--nproc-per-node", default="2")
    args = parser.parse_args()
    layout = ["--nodes", args.nodes, "--nproc-per-node", args.nproc_per_node, "--workload", "barrier"]
    folder = scratch()
    lab_s, hand_s, outside_s = [], [], []
    try:
        labctl("--help")                                  # warm the page cache once
        for i in range(args.reps):
            done, seconds = labctl("up", *layout, "-q", "--out", str(folder / f"run-{i}"))
            if done.returncode != 0:
                raise SystemExit(f"labctl up failed: {done.stderr.strip()[-2000:]}")
            lab_s.append(seconds)
            # status.json "seconds" is the backend's part: the rest is CLI start, plan, run folder, report
            backend_s = json.loads((folder / f"run-{i}" / "status.json").read_text())["seconds"]
            outside_s.append(seconds - backend_s)
            plan = render_plan(*layout)                   # a fresh run id and free port each time
            hand_s.append(run_by_hand(plan)[0])
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    ratio = median(lab_s) / median(hand_s)
    print(f"## Bring-up: labctl up vs torchrun by hand ({args.nodes}x{args.nproc_per_node}, "
          f"barrier workload, local backend, {args.reps} reps, alternating)\n")
    print(table(["", "median (s)", "min (s)", "max (s)", "all (s)"], [
        ["labctl up (CLI, whole run)", f"{median(lab_s):.2f}", f"{min(lab_s):.2f}", f"{max(lab_s):.2f}",
         " ".join(f"{x:.2f}" for x in lab_s)],
        ["torchrun agents by hand (same argv/env)", f"{median(hand_s):.2f}", f"{min(hand_s):.2f}",
         f"{max(hand_s):.2f}", " ".join(f"{x:.2f}" for x in hand_s)],
    ]))
    verdict = "met" if ratio <= TARGET else "MISSED"
    print(f"\nlabctl outside its backend (CLI start, spec, plan, run folder, log split, report): "
          f"median {median(outside_s):.3f} s; the local backend polls every 0.05 s (adds <= 0.05 s)")
    print(f"\nratio labctl/by-hand = {ratio:.3f} (target <= {TARGET}: {verdict}); "
          f"difference {median(lab_s) - median(hand_s):+.2f} s\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
