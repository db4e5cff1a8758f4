"""Bounded input: time and peak RSS of `labctl validate` (and the renders at the
largest world) on the largest accepted lab and on every hostile file of issue 23.

Each row is one fresh CLI process, timed from spawn to exit (wall) and by its own
user + sys time (CPU); its peak RSS is the child's own ru_maxrss (os.wait4).
Targets: every row under 1 s of CPU (on an idle machine wall ~ CPU; a loaded
shared one adds the wait for a core) and 100 MB, every
hostile file refused with exit 2 and one line, the largest accepted one exit 0.

    python benchmarks/validate.py [--reps 1]

The hostile files are tests/hostile_labs.py's (billion laughs in nodes, script_args,
env, k8s.annotations and k8s.affinity; 50 MB of comments; binary; UTF-8 ending in
\\xff\\xfe; 100,000 '['; deep block nesting; duplicate keys; a 200 KB env value; too
much env; a 4096 x 1024 world; a 5,000-digit number; timeout 1e308). docs/limits.md
shows the table.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _harness import LABCTL, REPO, median, table

sys.path.insert(0, str(REPO / "tests"))
import hostile_labs  # noqa: E402

TARGET_S, TARGET_MB = 1.0, 100.0


def measure(args: list[str], cwd: Path) -> tuple[float, float, float, int, str]:
    """(seconds, CPU seconds, peak RSS MB, exit code, last stderr line) of one CLI process."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    started = time.perf_counter()
    proc = subprocess.Popen([*LABCTL, *args], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = proc.stderr.read() if proc.stderr else b""
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    lines = err.decode(errors="replace").strip().splitlines()
    return (seconds, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, proc.returncode,
            lines[-1] if lines else "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=1, help="runs per row (the median is shown)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="labctl-bench-validate-") as tmp:
        return run(Path(tmp), args.reps)


def run(work: Path, reps: int) -> int:
    names = ["largest-accepted", *hostile_labs.HOSTILE]
    # Written by a child: a child's ru_maxrss starts at its parent's RSS (the high-water
    # mark survives fork and exec), and the 50 MB file must not count for every row.
    subprocess.run([sys.executable, "-c", "import sys, hostile_labs; from pathlib import Path; "
                    "[hostile_labs.write(Path(sys.argv[1]), n) for n in sys.argv[2:]]", str(work), *names],
                   check=True, cwd=REPO / "tests")
    max_world = ["--launcher", "direct", "--nodes", "64", "--nproc-per-node", "1024"]
    many_nodes = ["--launcher", "direct", "--nodes", "4096", "--nproc-per-node", "16"]
    rows_in: list[tuple[str, list[str], int]] = [
        ("largest accepted file (1 MiB, 65,536 ranks)",
         ["validate", "-f", "largest-accepted.yaml"], 0),
        ("validate 64 x 1024 direct", ["validate", *max_world], 0),
        ("render plan 64 x 1024 direct", ["render", "plan", *max_world], 0),
        ("render plan 4096 x 16 direct", ["render", "plan", *many_nodes], 0),
        ("render k8s 4096 x 16 direct", ["render", "k8s", *many_nodes], 0),
    ]
    for name in hostile_labs.HOSTILE:
        rows_in.append((name, ["validate", "-f", f"{name}.yaml"], 2))
    rows, worst_ok = [], True
    for label, cli_args, want in rows_in:
        runs = [measure(cli_args, work) for _ in range(reps)]
        seconds = median([r[0] for r in runs])
        cpu = median([r[1] for r in runs])
        mb = max(r[2] for r in runs)
        code, line = runs[-1][3], runs[-1][4]
        # judged on the process's own CPU time: on a loaded shared machine the wall time
        # mostly measures the other processes (both are shown)
        ok = code == want and cpu < TARGET_S and mb < TARGET_MB
        worst_ok &= ok
        size = (work / cli_args[2]).stat().st_size if cli_args[1:2] == ["-f"] else None
        rows.append([label, f"{size:,}" if size is not None else "", f"{seconds:.2f}", f"{cpu:.2f}",
                     f"{mb:.0f}",
                     code, "ok" if ok else "OVER", (line[:90] + "...") if len(line) > 90 else line])
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; seconds = wall, "
          "CPU = user + sys of the CLI process\n")
    print(table(["input", "file bytes", "seconds", "CPU s", "peak RSS MB", "exit", f"CPU < {TARGET_S:g} s, "
                 f"< {TARGET_MB:g} MB", "error line (cut)"], rows))
    return 0 if worst_ok else 1


if __name__ == "__main__":
    sys.exit(main())
