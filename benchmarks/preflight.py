"""Preflight cost: wall time of `labctl preflight` vs. `labctl up --workload barrier`.

The barrier lab is the cheapest lab that still forms the process group (launch
and rendezvous, no work); the preflight runs the same nodes with its checks
(DNS, port, /dev/shm, clock, all_reduce and p2p per node pair). The barrier lab
runs twice: with the default launcher (torchrun, what `up` would run) and with
`direct`, the preflight's own launcher, so that "extra" is the checks alone.
All are timed as a user sees them, a fresh CLI process each, alternating,
`--reps` times per backend (target: extra <= a few seconds).

    python benchmarks/preflight.py [--reps 3] [--backends local,compose]
        [--layout local=2x2,compose=2x1] [--image labctl-cpu:latest]
"""
from __future__ import annotations

import argparse
import shutil

from _harness import labctl, median, scratch, table

TARGET_EXTRA_S = 5.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--backends", default="local,compose")
    parser.add_argument("--layout", default="local=2x2,compose=2x1",
                        help="NODESxNPROC per backend")
    parser.add_argument("--image", help="container image (compose)")
    args = parser.parse_args()
    layouts = dict(item.split("=") for item in args.layout.split(","))
    folder = scratch()
    rows = []
    try:
        labctl("--help")                                  # warm the page cache once
        for backend in args.backends.split(","):
            nodes, nproc = layouts.get(backend, "2x1").split("x")
            common = ["--backend", backend, "--nodes", nodes, "--nproc-per-node", nproc, "-q"]
            if args.image and backend != "local":
                common += ["--image", args.image]
            times: dict[str, list[float]] = {"barrier": [], "direct": [], "preflight": []}
            for i in range(args.reps):
                for what, argv in (("barrier", ["up", "--workload", "barrier"]),
                                   ("direct", ["up", "--workload", "barrier", "--launcher", "direct"]),
                                   ("preflight", ["preflight"])):
                    done, seconds = labctl(*argv, *common, "--out", str(folder / f"{backend}-{what}-{i}"))
                    if done.returncode != 0:
                        raise SystemExit(f"labctl {what} on {backend} failed: {done.stderr.strip()[-2000:]}")
                    times[what].append(seconds)
            b, d, p = (median(times[k]) for k in ("barrier", "direct", "preflight"))
            rows.append([f"{backend} {nodes}x{nproc}", f"{b:.2f}", f"{d:.2f}", f"{p:.2f}",
                         f"{p / b:.2f}", f"{p / d:.2f}", f"{p - d:+.2f}",
                         " / ".join(" ".join(f"{x:.1f}" for x in times[k])
                                    for k in ("barrier", "direct", "preflight"))])
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"## Preflight vs barrier lab ({args.reps} reps each, alternating; medians, seconds)\n")
    print(table(["backend", "barrier (torchrun)", "barrier (direct)", "preflight",
                 "preflight / barrier torchrun", "preflight / barrier direct",
                 "extra vs direct", "all runs (torchrun / direct / preflight)"], rows))
    worst = max(float(r[6]) for r in rows)
    print(f"\nworst extra over the direct barrier lab {worst:+.2f} s (target <= {TARGET_EXTRA_S:g} s: "
          f"{'met' if worst <= TARGET_EXTRA_S else 'MISSED'})\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
