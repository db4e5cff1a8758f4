"""A traced run of 250,000 ops on local, and a hang at the last one (issue 52 item 1).

    python benchmarks/long_trace.py [--ops 250000]

One real lab (local, 1 node x 2, torchrun, tracing on): both ranks all_reduce a one-element
tensor OPS - 1 times (each rank writes several 8 MiB record segments), then rank 1 stops
(a sleep) while rank 0 waits in all_reduce #OPS. The lab ends as a hang once the live
watcher names it (`--on-hang stop`). Checked: every op of every segment read (trace.ops in
status.json: 2 x OPS - 1), no bad record, and the first failure names rank 1 and the
all_reduce it never entered, at that call's line (or rank 1's own line, the sleep).
Before the reader took a process's segments as one stream, ops past the first segment
(~108,000) referred to call sites it could not see, and the hang was blamed on the
wrong rank and op.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from _harness import labctl, table

SCRIPT = """\
import sys
import time
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, ops = dist.get_rank(), int(sys.argv[1])
t = torch.ones(1)
for _ in range(ops - 1):
    dist.all_reduce(t)
if rank == 1:
    time.sleep(3600)                        # RANK 1 STOPS
dist.all_reduce(t)                          # THE LAST ONE
dist.destroy_process_group()
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=250_000, help="collectives per rank (the last one skipped by rank 1)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="labctl-bench-long-") as tmp:
        script, out = Path(tmp) / "long.py", Path(tmp) / "run"
        script.write_text(SCRIPT)
        lines = {f"{script}:{i}" for i, x in enumerate(SCRIPT.splitlines(), 1) if "THE LAST ONE" in x or "STOPS" in x}
        started = time.monotonic()
        done, _ = labctl("up", "--script", str(script), "--nodes", "1", "--nproc-per-node", "2", "--timeout", "1800",
                         "--on-hang", "stop", "--out", str(out), "-q", "--", str(args.ops), timeout=2400)
        seconds = time.monotonic() - started
        status = json.loads((out / "status.json").read_text())
        first, trace = status.get("first_failure") or {}, status.get("trace") or {}
        segments = len(list((out / "records").glob("*.rec")))
        named = (first.get("rank"), first.get("op"), first.get("caller"))
        right = named[0] == 1 and named[1] == "all_reduce" and named[2] in lines
        rows = [["ops issued (both ranks)", 2 * args.ops, ""],
                ["ops read (trace.ops)", trace.get("ops"), "✓" if trace.get("ops", 0) >= 2 * args.ops - 1 else "✗"],
                ["bad records", trace.get("bad_records"), "✓" if not trace.get("bad_records") else "✗"],
                ["record files", segments, ""],
                ["first failure (rank, op, line)", f"{named[0]}, {named[1]}, {str(named[2]).rsplit(':', 1)[-1]}",
                 "✓" if right else "✗ (want 1, all_reduce, " + " or ".join(x.rsplit(":", 1)[1] for x in sorted(lines)) + ")"],
                ["lab exit code / wall time", f"{done.returncode} / {seconds:.0f} s", ""]]
    print(table(["", "value", "right"], rows))
    return 0 if all(r[2] in ("", "✓") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
