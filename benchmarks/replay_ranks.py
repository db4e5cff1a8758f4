"""Where a slow-node target's time goes, rank by rank: read from saved validation runs.

For each folder that benchmarks/replay.py wrote (its --out: fit2, slow3, slow4), from
each lab's trace.json (every op of every rank, entry and exit): per call, when each rank
left the op, in ms after the first rank entered it; the median over the timed calls (the
bench's check and warm-up calls left out), with the range. Two targets that the replay missed:

- all_gather at 4 nodes, the last node slow, 1 MiB and 4 MiB: rank 0 receives over the
  slow node's egress (3 -> 0), rank 3 over its ingress (2 -> 3);
- broadcast at 3 nodes, the last node slow, 1 and 4 MiB: the root sends to rank 1 (fast)
  and rank 2 (slow) at once. From rank 1's exit, the rate it got (S / its time), what the
  root had left for rank 2 meanwhile (the root's cable minus that), and rank 2's exit if
  it then got its own link alone: the exit that split implies, beside the measured one.

The replay's time beside them: the op's gloo schedule over the slow-node lab's links
(100 and 50 Mbit/s) times the run's own fitted efficiency (its fit2).

    python benchmarks/replay_ranks.py OUT [OUT ...]      # benchmarks/replay.py --out folders
"""
from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from labctl.rundir import RunDir  # noqa: E402
from workloads._protocol import algorithms as alg  # noqa: E402
from workloads._protocol.replay import Network, replay  # noqa: E402
from labctl.reports import benchpredict  # noqa: E402
from workloads._report import bench  # noqa: E402

MBIT = 1e6 / 8                   # bytes per second in one Mbit/s


def exits(lab: Path, name: str, nbytes: int, timed: int) -> list[list[float]]:
    """Per timed call of op `name` with `nbytes` per rank (the last `timed` calls: before
    them, the bench's check and warm-up calls): each rank's exit (ms after the call's first
    entry)."""
    trace = json.loads((lab / "trace.json").read_text())
    calls: dict[int, dict[int, tuple[float, float]]] = collections.defaultdict(dict)
    for e in trace["traceEvents"]:
        if e.get("ph") == "X" and e["name"] == name and e["args"].get("bytes") == nbytes:
            calls[e["args"]["seq"]][e["args"]["rank"]] = (e["ts"] / 1e3, (e["ts"] + e["dur"]) / 1e3)
    out = []
    for seq in sorted(calls)[-timed:]:
        c = calls[seq]
        t0 = min(begin for begin, _ in c.values())
        out.append([c[r][1] - t0 for r in sorted(c)])
    return out


def cell(values: list[float]) -> str:
    return f"{statistics.median(values):.0f} ({min(values):.0f}–{max(values):.0f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", help="benchmarks/replay.py --out folders (fit2, slow3, slow4)")
    args = parser.parse_args()
    print("| run | target | replay (ms) | rank 0 | rank 1 | rank 2 | rank 3 | rank 2 implied by rank 1's share |")
    print("|---|---|---|---|---|---|---|---|")
    for folder in map(Path, args.folders):
        fitted, *_ = benchpredict.replay_fit(RunDir.open(folder / "fit2").results())
        e = fitted.efficiency
        for n, op, name, size in ((4, "all_gather", "all_gather_single", 1 << 20),
                                  (4, "all_gather", "all_gather_single", 4 << 20),
                                  (3, "broadcast", "broadcast", 1 << 20), (3, "broadcast", "broadcast", 4 << 20)):
            per_rank = size // n if op == "all_gather" else size
            lab = folder / f"slow{n}"
            timed = int(bench.environment(RunDir.open(lab).results())["iters"])
            rows = exits(lab, name, per_rank, timed)
            if not rows:
                continue
            net = Network.uniform(n, 100 * MBIT).with_node(n - 1, 50 * MBIT).scaled(e)
            predicted = replay(alg.algorithm("gloo", op).schedule(n, size), net).seconds * 1e3
            cells = [cell([r[k] for r in rows]) for k in range(n)] + [""] * (4 - n)
            implied = ""
            if op == "broadcast":
                cable, slow = 100 * MBIT * e, 50 * MBIT * e
                guesses = []
                for r in rows:
                    t1 = r[1] / 1e3
                    got = max(0.0, cable - size / t1) * t1
                    guesses.append((t1 + max(0.0, size - got) / slow) * 1e3)
                share = statistics.median(size / (r[1] / 1e3) for r in rows) / cable
                implied = f"{statistics.median(guesses):.0f} (rank 1: {100 * share:.0f} % of the root's cable)"
            print(f"| {folder.name} | {op} n={n} {size >> 20} MiB | {predicted:.1f} | " + " | ".join(cells)
                  + f" | {implied} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
