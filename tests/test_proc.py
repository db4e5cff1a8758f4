"""workloads/_proc.py, the one /proc reader, on real processes: a hostile command name,
a zombie, a process tree, and a process that exits in the middle of a scan."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO

from labctl import procs
from labctl.backends.local import backend as local, nodeguard
from workloads import _proc, _stacks

# ')' and spaces in the name, and what a parser that stops at the first ')' would read
# as state Z and parent 9 (a command name holds at most 15 bytes)
HOSTILE = "x) (y z) Z 9 9"
CHILD = f"""
import ctypes, signal, subprocess, sys
ctypes.CDLL(None).prctl(15, {HOSTILE.encode()!r}, 0, 0, 0)     # PR_SET_NAME
signal.signal(signal.SIGUSR1, lambda *a: None)
grandchild = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"])
print(grandchild.pid, flush=True)
sys.stdin.read()
grandchild.wait()
"""


def _until(what, check, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_a_hostile_name_a_tree_and_a_zombie_read_right():
    before = time.time()
    child = subprocess.Popen([sys.executable, "-c", CHILD, "an arg"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, env={**os.environ, "PROC_TEST": "a=b"})
    try:
        grandchild = int(child.stdout.readline())
        st = _proc.stat(child.pid)
        assert st is not None
        assert (st.pid, st.comm, st.ppid, st.pgrp) == (child.pid, HOSTILE, os.getpid(), os.getpgrp())
        assert st.state != "Z" and not st.zombie and _proc.alive(child.pid)
        assert before - 1 <= st.started() <= time.time() + 1          # epoch seconds
        assert st.start_ticks >= _proc.stat().start_ticks                # born after us
        assert _proc.cmdline(child.pid)[-1] == "an arg"
        assert _proc.environ(child.pid)["PROC_TEST"] == "a=b"
        assert child.pid in [s.pid for s in _proc.stats()]
        mine = _proc.descendants(os.getpid())
        assert child.pid in mine and grandchild in mine
        assert mine.index(child.pid) < mine.index(grandchild)
        assert _proc.descendants(child.pid) == [grandchild]
        masks = _proc.signals(child.pid)
        assert masks.catches(signal.SIGUSR1) and not masks.catches(signal.SIGUSR2)
        assert procs.command_of(child.pid) == " ".join(child.args)[:300]
    finally:
        child.stdin.close()
    # ended but not reaped: a zombie, which has ended for every caller
    _until("the child to become a zombie", lambda: _proc.stat(child.pid).zombie)
    assert not _proc.alive(child.pid) and child.pid not in _proc.descendants(os.getpid())
    assert _proc.cmdline(child.pid) == []
    child.wait()
    for read in (_proc.stat, _proc.cmdline, _proc.signals):
        assert read(child.pid) is None
    assert _proc.environ(child.pid) == {} and not _proc.alive(child.pid)
    assert procs.command_of(child.pid) == "?"


def test_a_process_that_exits_during_a_scan_is_skipped(monkeypatch):
    run_id = f"proc-test-{os.getpid()}"
    env = {**os.environ, "LAB_RUN_ID": run_id, "RANK": "0"}
    victim = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                              stdin=subprocess.PIPE, env=env)
    survivor = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                                stdin=subprocess.PIPE, env=env)
    _until("both children to exec", lambda: all(
        _proc.environ(p.pid).get("LAB_RUN_ID") == run_id for p in (victim, survivor)))
    listed = _proc.pids

    def listing_then_exit() -> list[int]:
        """The listing holds the victim; it is gone (reaped) before any of it is read."""
        found = listed()
        if victim.poll() is None:              # the first scan: listed while alive
            assert victim.pid in found
            victim.kill()
            victim.wait()
        return found

    monkeypatch.setattr(_proc, "pids", listing_then_exit)
    try:
        assert victim.pid not in [s.pid for s in _proc.stats()]
        assert survivor.pid in _proc.descendants(os.getpid())
        assert victim.pid not in _proc.descendants(os.getpid())
        # the callers' scans too: the run's processes, and the rank to kill
        assert local.processes_of_run(run_id) == [survivor.pid]
        assert _stacks.kill_rank(run_id, 0) == [survivor.pid]
        assert survivor.wait(timeout=30) == -signal.SIGKILL
    finally:
        for p in (victim, survivor):
            p.kill()
            p.wait()


def test_the_node_guard_finds_the_protocol_without_an_install(tmp_path):
    """Run by path from elsewhere with no site module (-S: no .pth file, so not the
    editable install's finder either) and only psutil's folder on PYTHONPATH: the guard
    imports workloads._protocol from next to the labctl package it belongs to."""
    import psutil

    env = {**os.environ, "PYTHONPATH": str(Path(psutil.__file__).parent.parent)}
    done = subprocess.run([sys.executable, "-S", nodeguard.__file__, "--help"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "--lifeline" in done.stdout


NOT_OURS = """
from workloads import _proc, _stacks
try:
    open("/proc/1/environ", "rb").read()
    raise SystemExit("PID 1's environment is readable: nothing tested")
except PermissionError:
    pass
assert _proc.environ(1) == {}
assert _proc.stat(1) is not None and 1 in [st.pid for st in _proc.stats()]
assert _stacks.kill_rank("no-such-run", 0) == []
print("ok")
"""


@pytest.fixture
def workloads_anyone_can_import():
    """A copy of the workloads package in a folder every user may read: the checkout
    may sit under a 0700 folder (a home directory), where user nobody cannot import
    it, and pytest's own tmp_path is under a 0700 folder too."""
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="labctl-test-"))
    try:
        shutil.copytree(REPO / "workloads", folder / "workloads",
                        ignore=shutil.ignore_patterns("__pycache__"))
        for path in [folder, *folder.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        yield folder
    finally:
        shutil.rmtree(folder)


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv") or not os.path.exists("/usr/bin/python3"),
                    reason="needs root and setpriv to scan as a user who may not read root's processes")
def test_processes_of_another_user_are_read_as_far_as_allowed(workloads_anyone_can_import):
    """As user nobody, root's environments raise PermissionError: read as empty, and the
    scans over them go on. The system Python: the test venv may not be nobody's to run;
    the workloads package from a copy user nobody can read (the checkout may be private)."""
    done = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                           "/usr/bin/python3", "-c", NOT_OURS], cwd="/", capture_output=True,
                          text=True, timeout=60, env={"PYTHONPATH": str(workloads_anyone_can_import),
                                                      "PATH": os.environ["PATH"]})
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr
