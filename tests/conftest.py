"""Shared fixtures: run labs for real, and prove nothing of a run is left running."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
LABCTL = [sys.executable, "-m", "labctl.cli"]


def processes_of_run(run_id: str) -> list[int]:
    """PIDs whose environment carries LAB_RUN_ID=<run_id> (agents and workers alike)."""
    needle = f"LAB_RUN_ID={run_id}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def assert_nothing_left(run_id: str) -> None:
    deadline = time.monotonic() + 5
    while processes_of_run(run_id) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_of_run(run_id) == [], f"processes of {run_id} still running"


def labctl(*args: str, timeout: float = 600, **kw) -> subprocess.CompletedProcess:
    """Run the real CLI in a subprocess (as a user would)."""
    return subprocess.run([*LABCTL, *args], capture_output=True, text=True, timeout=timeout,
                          cwd=kw.pop("cwd", REPO), **kw)


@pytest.fixture
def write_script(tmp_path):
    def write(body: str, name: str = "script.py") -> Path:
        path = tmp_path / name
        path.write_text(body)
        return path
    return write
