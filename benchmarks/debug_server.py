"""torch's debug server next to the lab's report, on zoo cases (docs/diagnosis.md,
"torch's debug server").

    python benchmarks/debug_server.py                      # the default cases
    python benchmarks/debug_server.py --cases lock_stuck --json out.json

Each case runs as the zoo runs it (`labctl up --script CASE`, local backend, trace on)
with `--debug-server`. While it runs, the frontend's pages are asked: `/stacks` until
every rank's section answers (each rank's innermost line of the case file is what it
shows), `/tcpstore` (its keys, and their first path components), `/fr_trace` (its HTTP
status). After the end: the
report's first failure (rank, op, line) from status.json, and the dumps in the run
folder's debug-server/ (how many, each rank's line in the last stacks dump).
"""
from __future__ import annotations

import argparse
import json
import queue
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
from _zoo import lab_answer  # noqa: E402
ZOO = REPO / "benchmarks" / "zoo"
DEFAULT_CASES = ("recv_recv_deadlock", "lock_stuck", "missing_collective",
                 "sigkill_in_collective", "never_joins")
HEADER = re.compile(r"^# zoo: (.*)$", re.M)


def header(path: Path) -> dict[str, str]:
    fields: dict[str, str] = {}
    for line in HEADER.findall(path.read_text()):
        for word in line.split():
            if "=" in word and not line.startswith("about="):
                k, v = word.split("=", 1)
                fields[k] = v
    return fields


def get(url: str, timeout: float = 60) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:
            return answer.status, answer.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
    except (urllib.error.URLError, OSError) as exc:
        return 0, str(exc)


def lines_of(text: str, case: str, world: int, marker: str) -> dict[int, str]:
    """Each rank's innermost line of the case file in a stacks page or dump: of the last
    thread faulthandler lists that is in it (the main thread), or `-` when none is."""
    out = {}
    for rank in range(world):
        parts = text.split(f"{marker}{rank}:")
        if len(parts) < 2:
            out[rank] = "?"
            continue
        section = re.split(rf"{re.escape(marker)}\d+:", parts[1])[0]
        # faulthandler lists the main thread last, each thread's innermost frame first
        threads = [t for t in re.split(r"\n(?=Thread 0x|Current thread 0x)", section)
                   if f"{case}.py" in t]
        found = re.findall(rf'{re.escape(case)}\.py", line (\d+)', threads[-1]) if threads else []
        status = re.search(r"status=(\d+)", section)
        out[rank] = found[0] if found else (f"no answer ({status.group(1)})" if status else "-")
    return out


def run_case(name: str, root: Path) -> dict:
    path = ZOO / f"{name}.py"
    h = header(path)
    world, timeout = int(h.get("nproc", 2)), float(h.get("timeout", 30))
    out = root / name
    argv = [sys.executable, "-m", "labctl.cli", "up", "--script", str(path), "--nodes", "1",
            "--nproc-per-node", str(world), "--timeout", f"{timeout:g}", "--debug-server",
            "--out", str(out)]
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**__import__("os").environ, "PYTHONUNBUFFERED": "1",
                                 "PYTHONPATH": str(REPO)})
    said: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [said.put(x) for x in proc.stderr] + [said.put(None)],
                     daemon=True).start()
    url, row = None, {"case": name, "world": world, "header": h}
    while url is None:
        line = said.get()
        if line is None:
            break
        found = re.search(r"debug server: (http://\S+)", line)
        url = found.group(1) if found else None
    if url is not None:
        while proc.poll() is None:           # until every rank's section answers, or the end
            code, page = get(url + "/stacks")
            if code == 200:
                row["stacks_s"] = round(time.monotonic() - t0, 1)
                row["live"] = lines_of(page, name, world, "Rank ")
                break
            time.sleep(0.5)
        if "live" in row:
            code, page = get(url + "/tcpstore")
            keys = re.findall(r"^\s*(\S+): b", page, re.M) if code == 200 else []
            row["tcpstore_keys"] = len(keys) if code == 200 else code
            row["tcpstore_prefixes"] = sorted({k.split("/")[0] for k in keys})
            row["fr_trace"] = get(url + "/fr_trace")[0]
    proc.wait()
    row["seconds"] = round(time.monotonic() - t0, 1)
    status = json.loads((out / "status.json").read_text())
    row["state"] = status.get("state")
    answer = lab_answer(status, path.name, row["seconds"])      # as the zoo reads the report
    row["report"] = {"ranks": sorted(answer.culprits), "op": answer.op, "line": answer.line}
    dumps = sorted((out / "debug-server").glob("stacks_*.txt"))
    row["dumps"] = len(list((out / "debug-server").glob("*_*.txt")))
    row["last_dump"] = lines_of(dumps[-1].read_text(), name, world, "=== Rank ") if dumps else None
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default=",".join(DEFAULT_CASES))
    parser.add_argument("--json")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.cases.split(","):
            row = run_case(name, Path(tmp))
            print(json.dumps(row), flush=True)
            rows.append(row)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
