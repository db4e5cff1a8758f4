"""How long torch takes to notice each injected fault: `python benchmarks/faults.py`.

Every case runs a 2 x 1 gloo lab whose ranks all_reduce in a loop, injects one
fault once every node runs, and reads the run folder: when the fault fired
(faults.jsonl), when the healthy peer's *rank* raised (its traceback's first
line, timestamped by the node log's `labctl: rank ... exited` line or, under
torchrun, by the node's end) and what it raised. Detection time = the peer
node's end - the fault. `--backend compose` also runs partition; `--pg-timeout`
sets the collective timeout (default 10 s).

    python benchmarks/faults.py [--backend local|compose] [--launcher direct|torchrun]
                                [--pg-timeout 10] [--repeat 1] [--only kill-rank]
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
from pathlib import Path

from _harness import labctl, table

LOOP = """
import os, time, torch, torch.distributed as dist
from datetime import timedelta
dist.init_process_group("gloo", timeout=timedelta(seconds=float(os.environ["LAB_PG_TIMEOUT"])))
x = torch.ones(4)
while True:
    dist.all_reduce(x)
    x.fill_(1)
    time.sleep(0.02)
"""
CASES = {"local": ["kill-rank:1@{t}", "kill-node:1@{t}", "stop-node:1@{t}+60"],
         "compose": ["kill-rank:1@{t}", "kill-node:1@{t}", "stop-node:1@{t}+60",
                     "partition:1@{t}+60"]}


def one(backend: str, fault: str, pg_timeout: float, folder: Path, launcher: str = "direct") -> dict:
    script = folder / "loop.py"
    script.write_text(LOOP)
    out = folder / f"run-{len(list(folder.glob('run-*')))}"
    done, wall = labctl("up", "--backend", backend, "--script", str(script), "--nodes", "2",
                        "--nproc-per-node", "1", "--launcher", launcher, "--fault", fault,
                        "--pg-timeout", f"{pg_timeout:g}", "--timeout", "400", "--out", str(out),
                        timeout=600)
    status = json.loads((out / "status.json").read_text())
    fired = [json.loads(line) for line in (out / "faults.jsonl").read_text().splitlines()]
    begin = next(f for f in fired if f["phase"] == "begin")
    peer = status["node_outcomes"][0]
    error = (status.get("rank_errors") or {}).get("0") or {}
    return {"fault": fault, "state": status["state"], "fired_s": begin["lab_s"],
            "peer_state": peer["state"],
            "peer_ended_s": peer.get("exited_s"),
            "detect_s": round(peer["exited_s"] - begin["lab_s"], 2) if peer.get("exited_s") else None,
            "peer_error": re.sub(r"\[[^\]]*\.cc:\d+\] ", "", error.get("exception") or "")[:100],
            "wall_s": round(wall, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="local", choices=sorted(CASES))
    parser.add_argument("--pg-timeout", type=float, default=10.0)
    parser.add_argument("--at", type=float, default=30.0, help="fault time T (after every node started)")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--launcher", default="direct", choices=("direct", "torchrun"))
    parser.add_argument("--only", help="comma list of fault kinds (default: every one the backend can do)")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for template in CASES[args.backend]:
            if args.only and template.split(":")[0] not in args.only.split(","):
                continue
            fault = template.format(t=f"{args.at:g}")
            runs = [one(args.backend, fault, args.pg_timeout, Path(tmp), args.launcher) for _ in range(args.repeat)]
            detect = [r["detect_s"] for r in runs if r["detect_s"] is not None]
            rows.append((fault, runs[-1]["state"], runs[-1]["peer_state"],
                         statistics.median(detect) if detect else None, runs[-1]["peer_error"]))
            print(json.dumps(runs), file=sys.stderr, flush=True)
    print(f"backend {args.backend}, pg_timeout {args.pg_timeout:g}s, {args.launcher} launcher, 2 x 1 gloo, "
          f"median of {args.repeat}")
    print(table(("fault", "lab", "peer node", "peer ended after (s)", "what the peer raised"), rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
