"""labctl's peak memory with a script that prints hostile result lines (issue 52 item 2).

    python benchmarks/hostile_results.py [--lines 0,1000,10000]

One real lab per row (local, 1 node x 2, direct launcher): rank 0 prints a small honest
bench sweep and N hostile `@@labctl-result` lines (tests/hostile_results.py: huge,
negative, NaN, infinite, nested and wrongly typed values in every field labctl computes
with). Then the commands on the folder: `labctl report`, `report --format html`,
`predict -n 4`. Each process's own peak RSS (VmHWM, sampled) and wall time; target: peak
RSS < 200 MB, every hostile line counted as ignored. Before the bounds three such lines
took `labctl up` to 23 GB.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from _harness import LABCTL, REPO, table

sys.path.insert(0, str(REPO / "tests"))
import hostile_results  # noqa: E402

TARGET_MB = 200.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", default="0,1000,10000", help="hostile lines per row, comma-separated")
    args = parser.parse_args()
    counts = [int(x) for x in args.lines.split(",")]
    rows, met = [], True
    with tempfile.TemporaryDirectory(prefix="labctl-bench-hostile-") as tmp:
        for count in counts:
            work = Path(tmp) / f"n{count}"
            work.mkdir()
            script = work / "hostile.py"
            script.write_text(hostile_results.script(count))
            out = work / "run"
            for label, argv in (
                    ("labctl up", ["up", "-q", "--script", str(script), "--nodes", "1", "--nproc-per-node", "2",
                                   "--launcher", "direct", "--out", str(out)]),
                    ("labctl report", ["report", str(out)]),
                    ("labctl report --format html", ["report", str(out), "--format", "html"]),
                    ("labctl predict -n 4", ["predict", str(out), "-n", "4"])):
                started = time.perf_counter()
                code, peak, _, stderr = hostile_results.peak_rss([*LABCTL, *argv], work, cwd=REPO)
                seconds = time.perf_counter() - started
                status = json.loads((out / "status.json").read_text()) if (out / "status.json").is_file() else {}
                ignored = (status.get("ignored_results") or {}).get("count", 0)
                ok = peak < TARGET_MB and code == 0 and ignored == count
                met &= ok
                rows.append([f"{count:,}", label, f"{seconds:.1f}", f"{peak:.0f}", code, status.get("state", ""),
                             f"{ignored:,}", "met" if ok else "MISSED"])
    print(f"hostile result lines: labctl's peak RSS (target < {TARGET_MB:.0f} MB, every line counted as ignored)\n")
    print(table(["hostile lines", "command", "seconds", "peak RSS MB", "exit", "state", "ignored", "target"], rows))
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
