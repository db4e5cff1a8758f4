"""The pipeline bubble, measured against (p-1)/(m+p-1): a benchmark, not a test.

For p = 4 stages (4 ranks on one node) and m = 4 and 8 microbatches, one pp lab each runs
GPipe, 1F1B and interleaved 1F1B; every stage's forward is `compute_ms` of sleep and its
backward twice that (workloads/pp.py says why a sleep: on 2 shared cores busy work would
measure the machine, not the schedule). The bubble is read from the run's own records
(workloads/_report/pp.py `measured`: each rank's idle share of the step's span, averaged,
the steps after the first) and printed beside the formula; the bar is 5 points.

    .venv/bin/python benchmarks/bubble.py [--compute-ms 50] [--steps 4] [--keep DIR]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from workloads._report import pp  # noqa: E402


def lab(folder: Path, m: int, compute_ms: float, steps: int) -> list[dict]:
    """One pp lab of 4 ranks, every schedule, m microbatches; its result records."""
    spec = folder / f"bubble-m{m}.yaml"
    spec.write_text(json.dumps({"name": f"bubble-m{m}", "nodes": 1, "nproc_per_node": 4, "workloads": [
        {"pp": {"microbatches": m, "batch": 2 * m, "steps": steps, "compute_ms": compute_ms}}]}))
    out = folder / f"m{m}"
    done = subprocess.run([str(REPO / ".venv/bin/labctl"), "up", "--quiet", "-f", str(spec), "--timeout", "600",
                           "--out", str(out)], capture_output=True, text=True, cwd=folder)
    if done.returncode != 0:
        raise SystemExit(f"the m = {m} lab failed (exit {done.returncode}):\n"
                         f"{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if line.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compute-ms", type=float, default=50.0)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--keep", type=Path, help="keep the run folders here")
    args = parser.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="bubble-"))
    folder.mkdir(parents=True, exist_ok=True)
    print(f"p = 4 stages, F {args.compute_ms:g} ms / B {2 * args.compute_ms:g} ms of sleep a stage, "
          f"{args.steps} steps (the first left out); runs in {folder}")
    print("| schedule | m | measured bubble | per step % | formula | diff (points) | within 5 |")
    print("|---|---|---|---|---|---|---|")
    for m in (4, 8):
        for name, records in pp.schedules(lab(folder, m, args.compute_ms, args.steps)).items():
            mean, per = pp.measured(records)
            v = records[0].get("stages_per_rank", 1)
            theory = pp.formula(4, m, v)
            text = f"3/{v * m + 3}" + (f" (v = {v})" if v > 1 else "")
            diff = 100 * (mean - theory)
            within = "yes" if abs(diff) <= pp.TOLERANCE_POINTS else "no"
            print(f"| {name} | {m} | {100 * mean:.1f} % | {', '.join(f'{100 * b:.1f}' for b in per)} | "
                  f"{text} = {100 * theory:.1f} % | {diff:+.1f} | {within} |", flush=True)


if __name__ == "__main__":
    main()
