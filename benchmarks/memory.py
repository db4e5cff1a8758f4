"""labctl's own peak memory while a rank prints a lot: 1 MiB, 100 MiB, 1 GiB of output.

Node logs go straight to disk (the local node guards write them) and the
per-rank split is one streaming pass that the driver runs *while the lab
runs*, so labctl's peak RSS should not grow with the log (goal: under 100 MiB
at every size) and the end of a run should cost no more than one read of the
logs. For each size and launcher the table gives labctl's peak RSS (VmHWM of
the labctl process, sampled every 20 ms), the wall time of `labctl up`, what
the end of the run cost (`finalize_seconds` in status.json: what the follower
had not reached yet), labctl's whole pass redone from scratch on the same
folder, the node-log split from scratch (what compose and Kubernetes runs,
whose logs arrive after the fact, pay; with the direct launcher the local
guards write the rank logs themselves and labctl only reads them), and one
plain Python `readline` pass over the node logs.

    python benchmarks/memory.py [--sizes 1,100,1024] [--launchers direct,torchrun] [--all-ranks]
                                [--one-line]

`--one-line`: the rank prints its output as one line without a newline (the rank
log must keep those bytes; only the readers split it, in 1 MiB pieces).
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRIPT = """
import sys, torch.distributed as dist
dist.init_process_group("gloo")
if dist.get_rank() in {printers}:
    line = "x" * 1023 + ("x" if {one_line} else "\\n")
    block = line * 1024
    for _ in range({mib}):
        sys.stdout.write(block)
    sys.stdout.flush()
dist.barrier()
"""


def peak_rss(argv: list[str]) -> tuple[int, float, float]:
    """(exit code, peak RSS in MiB, seconds) of `argv`, sampling its VmHWM until it exits."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    peak = 0
    while proc.poll() is None:
        try:
            for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak = max(peak, int(line.split()[1]))
        except (OSError, ValueError):
            pass
        time.sleep(0.02)
    return proc.returncode, peak / 1024, time.perf_counter() - t0


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def read_once(out: Path) -> None:
    for log in sorted((out / "nodes").glob("*.log")):
        with open(log, "rb") as f:
            while f.readline(1 << 20):
                pass


def newlines(path: Path) -> int:
    count = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            count += chunk.count(b"\n")
    return count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,100,1024", help="MiB of rank output, comma-separated")
    parser.add_argument("--launchers", default="direct,torchrun", help="comma-separated")
    parser.add_argument("--all-ranks", action="store_true",
                        help="every rank prints that much (both nodes' logs grow at once)")
    parser.add_argument("--one-line", action="store_true",
                        help="the output is one line with no newline at all")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from labctl.outcome import NodeOutcome, NodeState
    from labctl.rundir import RunDir

    print("| rank output | launcher | labctl peak RSS | `labctl up` wall | end of run (finalize) "
          "| labctl's whole pass from scratch | node-log split from scratch "
          "| one Python read of the logs | state |")
    print("|---|---|---|---|---|---|---|---|---|")
    for launcher in args.launchers.split(","):
        for mib in (int(x) for x in args.sizes.split(",")):
            work = Path(tempfile.mkdtemp(prefix="labctl-mem-"))
            try:
                script = work / "print.py"
                script.write_text(SCRIPT.format(mib=mib, printers="(0, 1)" if args.all_ranks else "(0,)",
                                                one_line=args.one_line))
                out = work / "run"
                code, rss, wall = peak_rss([sys.executable, "-m", "labctl.cli", "up", "-q",
                                            "--script", str(script), "--nodes", "2",
                                            "--nproc-per-node", "1", "--launcher", launcher,
                                            "--out", str(out)])
                status = json.loads((out / "status.json").read_text())
                state, end = status["state"], status.get("finalize_seconds", float("nan"))
                size = mib << 20
                rank0 = out / "ranks" / "rank-0.log"
                kept = "" if not args.one_line else (
                    ", rank log kept" if rank0.stat().st_size == size and newlines(rank0) == 0
                    else ", RANK LOG CHANGED")
                state += kept       # before the passes below rewrite rank logs
                run = RunDir.open(out)
                outcomes = [NodeOutcome(i, f"lab-{i}", 0, NodeState.SUCCEEDED) for i in (0, 1)]
                whole = timed(lambda: finish_again(run, outcomes))
                split = whole
                if run.record.rank_logs_by_guards:
                    run.record.rank_logs_by_guards = False
                    split = timed(lambda: finish_again(run, outcomes))
                read = timed(lambda: read_once(out))
                print(f"| {mib} MiB{' x 2 ranks' if args.all_ranks else ''}"
                      f"{' in one line' if args.one_line else ''} | {launcher} | {rss:.0f} MiB "
                      f"| {wall:.1f} s | {end:.2f} s | {whole:.2f} s | {split:.2f} s | {read:.2f} s "
                      f"| {state} (exit {code}) |", flush=True)
            finally:
                shutil.rmtree(work, ignore_errors=True)
    return 0


def finish_again(run, outcomes) -> None:
    """labctl's whole finish of the folder again (labctl/finish.py), as after a run whose
    every node succeeded."""
    from labctl import finish
    from labctl.verdict import Ending, Seen

    finish.finish(run, Seen(Ending.ALL_ENDED, list(outcomes)), lambda line: None)


if __name__ == "__main__":
    raise SystemExit(main())
