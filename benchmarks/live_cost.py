"""What the live watcher (labctl/live/, issue 49) costs a lab, printed as a table.

The same traced lab runs in pairs, the watcher on (the default) and off, the pairs
interleaved and their order alternating; what counts is the median of the pairs' ratios
(a shared 2-core machine spreads single runs widely). Two measures:

- the ranks' own time: a loop of N all_reduces of 4 KiB (2 ranks), timed inside the script
  (the bar of docs/trace.md for the trace: <= 1.05x; the watcher must add nothing to it);
- labctl's own CPU: the process time of the labctl that runs the lab (the watcher runs in
  its loop), per second of the lab.

    python benchmarks/live_cost.py [--pairs 5] [--ops 5000]

The watcher is turned off the way no user turns it off: `labctl.live.watcher_for` replaced
in this process (the lab is run in-process, through `labctl.lab.up`).
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from labctl import lab, live  # noqa: E402
from labctl.spec import from_dict  # noqa: E402
from labctl.tables import table  # noqa: E402

LOOP = """\
import time
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1024)
for _ in range(200):
    dist.all_reduce(t)
start = time.perf_counter()
for _ in range({ops}):
    dist.all_reduce(t)
took = time.perf_counter() - start
if dist.get_rank() == 0:
    print(f"LOOP_S={{took:.6f}}", flush=True)
dist.destroy_process_group()
"""


def quiet(line: str) -> None:
    """No progress lines, and no live view (`progress.quiet`, as `labctl up -q`)."""


quiet.quiet = True                  # type: ignore[attr-defined]


def run_once(folder: Path, script: Path, watcher: bool) -> tuple[float, float, float]:
    """(the loop's seconds, labctl's CPU seconds, the lab's seconds) of one lab."""
    original = live.watcher_for
    if not watcher:
        live.watcher_for = lambda *a, **k: None
    try:
        spec = from_dict({"script": str(script), "nodes": 1, "nproc_per_node": 2, "timeout": 600,
                          "out": str(folder)}, source="live_cost")
        cpu0, t0 = time.process_time(), time.monotonic()
        run = lab.up(spec, progress=quiet)
        cpu, took = time.process_time() - cpu0, time.monotonic() - t0
    finally:
        live.watcher_for = original
    text = run.rank_log(0).read_text(errors="replace")
    m = re.search(r"LOOP_S=([0-9.]+)", text)
    if not m or not run.record.ok:
        raise SystemExit(f"the lab in {folder} did not pass or print its loop time")
    return float(m.group(1)), cpu, took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--ops", type=int, default=5000)
    args = parser.parse_args()
    if not 1 <= args.pairs <= 50 or not 100 <= args.ops <= 10 ** 6:
        print("error: --pairs 1-50, --ops 100-1000000", file=sys.stderr)
        return 2
    root = Path(tempfile.mkdtemp(prefix="labctl-live-cost-"))
    script = root / "loop.py"
    script.write_text(LOOP.format(ops=args.ops))
    rows, loop_ratios, cpu_on, cpu_off = [], [], [], []
    for i in range(args.pairs):
        got = {}
        load = os.getloadavg()[0]
        for watcher in ((True, False) if i % 2 == 0 else (False, True)):
            got[watcher] = run_once(root / f"run-{i}-{'on' if watcher else 'off'}", script, watcher)
        on, off = got[True], got[False]
        loop_ratios.append(on[0] / off[0])
        cpu_on.append(on[1] / on[2])
        cpu_off.append(off[1] / off[2])
        rows.append((i + 1, f"{on[0]:.3f}", f"{off[0]:.3f}", f"{on[0] / off[0]:.3f}",
                     f"{1000 * on[1] / on[2]:.1f}", f"{1000 * off[1] / off[2]:.1f}", f"{load:.1f}"))
    print(table(("pair", "loop s, watcher on", "off", "on/off", "labctl CPU ms/s, on", "off", "load"), rows))
    print(f"\nmedian loop ratio (watcher on / off): {statistics.median(loop_ratios):.3f} "
          f"({args.ops} all_reduces of 4 KiB, 2 ranks); labctl's CPU per lab second: "
          f"{1000 * statistics.median(cpu_on):.1f} ms on, {1000 * statistics.median(cpu_off):.1f} ms off")
    return 0


if __name__ == "__main__":
    sys.exit(main())
