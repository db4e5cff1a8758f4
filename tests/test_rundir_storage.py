"""A run folder that fails under a running lab: its disk fills (a real 5 MB tmpfs), goes
read-only, or is deleted; or its disk is too full before the start. Each is a clear
end: the lab stopped within seconds, nothing left running, one line naming the path
and the cause, status.json where it can be written, no *.tmp. Real processes."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import LABCTL, REPO, assert_nothing_left, labctl

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")]

# prints `ready`, then (with FLOOD) 20 MB, then waits for a file that never comes:
# only the run folder's failure can end this lab before its deadline
SCRIPT = """
import os, sys, time
print("ready", flush=True)
if os.environ.get("FLOOD"):
    line = "x" * 1023 + "\\n"
    for _ in range(20 * 1024):
        sys.stdout.write(line)
    sys.stdout.flush()
while not os.path.exists("never"):
    time.sleep(0.2)
"""
LAB = ["--launcher", "direct", "--nodes", "1", "--nproc-per-node", "1", "--timeout", "300"]


@contextlib.contextmanager
def tmpfs(path: Path, size: str = "5m"):
    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(path)], capture_output=True)
        subprocess.run(["umount", "-l", str(path)], check=True)


def start(tmp_path: Path, out: Path, flood: bool) -> subprocess.Popen:
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    env = {**os.environ, **({"FLOOD": "1"} if flood else {})}
    return subprocess.Popen([*LABCTL, "up", "-q", "--script", str(script), *LAB, "--out", str(out)],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def wait_ready(proc: subprocess.Popen, out: Path) -> str:
    """The run id, once rank 0 said `ready` in its own log (the lab runs)."""
    deadline = time.monotonic() + 120
    log = out / "ranks" / "rank-0.log"
    while time.monotonic() < deadline and proc.poll() is None:
        if log.is_file() and b"ready" in log.read_bytes()[:100]:
            return json.loads((out / "status.json").read_text())["run_id"]
        time.sleep(0.1)
    proc.kill()
    pytest.fail("the lab never got ready: " + "".join(proc.communicate()))


def one_line(proc: subprocess.Popen, seconds: float = 60) -> str:
    stdout, stderr = proc.communicate(timeout=seconds)
    assert proc.returncode == 1, (stdout, stderr)
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    return lines[0]


def no_tmp(folder: Path) -> None:
    assert not [p for p in folder.rglob("*.tmp")], list(folder.rglob("*.tmp"))


def test_a_full_disk_stops_the_lab_with_one_line_and_a_status(tmp_path):
    """A rank printing 20 MB into a run folder on a 5 MB tmpfs (was: `No space left on
    device` without a path, status.json left `running`, *.tmp files, `down` failing)."""
    with tmpfs(tmp_path / "disk") as disk:
        out = disk / "run"
        proc = start(tmp_path, out, flood=True)
        line = one_line(proc)
        assert f"'{out}'" in line and "no space left on device" in line.lower(), line
        status = json.loads((out / "status.json").read_text())
        assert status["state"] == "error" and "no space left" in status["message"].lower()
        assert_nothing_left(status["run_id"])
        no_tmp(disk)
        down = labctl("down", str(out))
        assert down.returncode == 0 and "Traceback" not in down.stderr, down.stderr


def test_a_read_only_or_too_full_disk_before_the_start_is_a_refusal(tmp_path):
    """A disk with less than the documented free space (MIN_FREE_BYTES, 1 MiB) or a
    read-only one, before the start: exit 2, one line, nothing made (was: exit 1).
    (A disk that goes read-only under a running lab cannot be made so while files on it
    are open for writing — the remount is refused — so that path is the same
    statvfs check as a full disk, tested above.)"""
    with tmpfs(tmp_path / "disk") as disk:
        out = disk / "run"
        with open(disk / "filler", "wb") as f:     # leave less than 1 MiB
            f.write(b"\0" * ((4 << 20) + (512 << 10)))
        refused = labctl("up", "-q", *LAB, "--out", str(out))
        assert refused.returncode == 2, refused.stderr
        assert refused.stderr.count("\n") == 1 and f"'{out}'" in refused.stderr
        assert "bytes free" in refused.stderr and not out.exists()
        (disk / "filler").unlink()
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        refused = labctl("up", "-q", *LAB, "--out", str(out))
        assert refused.returncode == 2, refused.stderr
        assert refused.stderr.count("\n") == 1 and "read-only" in refused.stderr


def test_a_deleted_run_folder_stops_the_lab_within_seconds(tmp_path):
    """rm -rf of the run folder while the lab runs (was: unnoticed until the deadline,
    then `No such file or directory: '…/status.json.tmp` with its quote missing)."""
    out = tmp_path / "run"
    proc = start(tmp_path, out, flood=False)
    run_id = wait_ready(proc, out)
    shutil.rmtree(out)
    t0 = time.monotonic()
    line = one_line(proc, seconds=60)
    assert time.monotonic() - t0 < 30, "noticed long after the folder was gone"
    assert line == f"error: run folder '{out}' was deleted while the lab ran; the lab was stopped"
    assert_nothing_left(run_id)
