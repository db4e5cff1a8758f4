"""Shared by the benchmark scripts: run labctl, or the same plan by hand, and time it.

"By hand" means: take the exact processes `labctl render plan` lists (argv
and env per node, the launch contract in labctl/plan.py) and start them with
subprocess, nothing else. Comparing that with `labctl up` isolates what the
lab adds on top of torchrun.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# the console script a user runs (`python -m labctl.cli` would compile cli.py on every
# start: a __main__ module's bytecode is never cached)
_SCRIPT = Path(sys.executable).parent / "labctl"
LABCTL = [str(_SCRIPT)] if _SCRIPT.is_file() else [sys.executable, "-m", "labctl.cli"]
# Timed as on a user's machine, where Python caches bytecode: a shell that sets
# PYTHONDONTWRITEBYTECODE (this project's dev machines do) makes every labctl start
# compile its 50 modules again, 0.08 s that no installed labctl pays. Both sides of
# every comparison run without it.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.path.insert(0, str(REPO))

from labctl import plan as planmod  # noqa: E402
from labctl.report import table  # noqa: E402  (after the path fix, for a plain `python benchmarks/x.py`)

__all__ = ["REPO", "LABCTL", "table", "labctl", "render_plan", "run_by_hand", "write_lab", "median"]


def labctl(*args: str, timeout: float = 600) -> tuple[subprocess.CompletedProcess, float]:
    """Run the real CLI; return the finished process and its wall time in seconds."""
    started = time.perf_counter()
    done = subprocess.run([*LABCTL, *args], capture_output=True, text=True, timeout=timeout, cwd=REPO)
    return done, time.perf_counter() - started


def write_lab(folder: Path, **fields) -> Path:
    """A lab description file (JSON is YAML) so that workload options can be passed."""
    path = folder / f"lab-{len(list(folder.glob('lab-*.yaml')))}.yaml"
    path.write_text(json.dumps(fields))
    return path


def render_plan(*args: str) -> dict:
    done, _ = labctl("render", "plan", *args)
    if done.returncode != 0:
        raise RuntimeError(f"labctl render plan {' '.join(args)} failed: {done.stderr.strip()}")
    return json.loads(done.stdout)


def run_by_hand(plan: dict, timeout: float = 300) -> tuple[float, list[str]]:
    """Start every process of `plan` as labctl would, wait for all; (seconds, outputs)."""
    procs = []
    started = time.perf_counter()
    try:
        for node in plan["nodes"]:
            for proc in planmod.process_dicts(node):
                procs.append(subprocess.Popen(
                    proc["argv"], env={**os.environ, **proc["env"]}, cwd=REPO,
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    start_new_session=True))
        outputs = [p.communicate(timeout=max(1.0, timeout - (time.perf_counter() - started)))[0]
                   for p in procs]
        seconds = time.perf_counter() - started
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    bad = [p.returncode for p in procs if p.returncode != 0]
    if bad:
        raise RuntimeError(f"by-hand run failed with exit codes {bad}: "
                           f"{outputs[0].decode(errors='replace')[-2000:]}")
    return seconds, [o.decode(errors="replace") for o in outputs]


def median(values: list[float]) -> float:
    xs = sorted(values)
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2


def scratch() -> Path:
    return Path(tempfile.mkdtemp(prefix="labctl-bench-"))
