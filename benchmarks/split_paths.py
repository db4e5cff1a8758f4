"""What the node-log split's fast skip saves over its line-by-line path.

A node log of one rank's plain lines (no results, tracebacks or other ranks) is
split once through labctl.logs.NodeLogReader as every backend's logs are (whole
chunks of plain lines are skipped over: their prefixes cut off at once, nothing
decoded or looked at), and once with the skip switched off so that every line
goes through the line-by-line path (what results, tracebacks, stack dumps and
torchrun's glued half-lines need). Both write the same bytes (tests/test_logs.py).
The rank log goes to /dev/null; the log is in memory, so only the split's own CPU
is timed. Best of `--reps`. Lines of 1 KiB are benchmarks/memory.py's; ~100 bytes
is a usual log line.

    python benchmarks/split_paths.py [--mib 100] [--widths 1024,100] [--reps 2]
"""
from __future__ import annotations

import argparse
import io
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from labctl import logs  # noqa: E402


def split_seconds(data: bytes, fast: bool) -> float:
    out = open("/dev/null", "wb")
    reader = logs.NodeLogReader(lambda rank, data: out.write(data))
    if not fast:      # no chunk or run is skipped: every line goes the line-by-line way
        reader._one_rank_chunk = lambda chunk: False
        reader._plain_run = lambda rank, run: False
    t0 = time.perf_counter()
    reader.feed_stream(io.BytesIO(data))
    reader.close()
    out.close()
    return time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=100, help="size of the node log")
    parser.add_argument("--widths", default="1024,100", help="line lengths in bytes, prefix included")
    parser.add_argument("--reps", type=int, default=2)
    args = parser.parse_args()
    print("| node log | line length | fast skip | line by line | line by line / fast |")
    print("|---|---|---|---|---|")
    for width in (int(w) for w in args.widths.split(",")):
        line = b"[rank0]:" + b"x" * (width - 9) + b"\n"
        data = line * ((args.mib << 20) // width)
        fast = min(split_seconds(data, True) for _ in range(args.reps))
        slow = min(split_seconds(data, False) for _ in range(args.reps))
        print(f"| {args.mib} MiB | {width} B | {fast:.2f} s | {slow:.2f} s | {slow / fast:.1f}x |",
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
