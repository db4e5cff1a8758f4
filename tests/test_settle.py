"""workloads/_settle.py: a rank whose gloo worker still drops a work issued in a backward
pass when the interpreter begins finalizing is not aborted (torch 2.13's own bug: a
plain `python` run of the same script aborts, "terminate called without an active
exception")."""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading

import pytest

from conftest import REPO
from workloads import _settle

# Rank 0 issues an all_reduce inside a backward pass and does not keep the work: gloo's
# worker holds the last reference. Its last exit handler (registered before torch's) is a
# C call that holds the GIL (no Python frame, so nothing lets the GIL go); rank 1 joins the
# op once rank 0 is exiting:
# the worker completes the op and waits for the GIL to drop the work, and the interpreter
# then finalizes.
LATE = """
import atexit, os, sys, time
rank, path = int(sys.argv[1]), sys.argv[2]
if rank == 0:      # registered before torch's own exit handlers: runs after them, last
    atexit.register(sum, range(100_000_000))
import torch, torch.distributed as dist
dist.init_process_group("gloo", init_method="file://" + path, rank=rank, world_size=2)

class IssuesInBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 1

    @staticmethod
    def backward(ctx, grad):
        if rank == 0:
            dist.all_reduce(torch.ones(4), async_op=True)
        return grad

IssuesInBackward.apply(torch.ones(3, requires_grad=True)).sum().backward()
if rank == 0:
    atexit.register(open, path + ".exiting", "w")      # runs first
else:
    while not os.path.exists(path + ".exiting"):
        time.sleep(0.01)
    time.sleep(0.2)
    dist.all_reduce(torch.ones(4))
print("rank", rank, "leaves", flush=True)
"""


def _run_pair(tmp_path, launch: list[str], trace: str) -> subprocess.CompletedProcess:
    script = tmp_path / "late.py"
    script.write_text(LATE)
    init = tmp_path / f"init-{len(launch)}-{trace}"
    env = {**os.environ, "LAB_TRACE": trace, "PYTHONPATH": str(REPO)}
    peer = subprocess.Popen([*launch, str(script), "1", str(init)], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        return subprocess.run([*launch, str(script), "0", str(init)], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=180)
    finally:
        peer.wait(timeout=180)


def test_torch_aborts_a_rank_whose_gloo_worker_drops_a_backward_work_during_finalization(tmp_path):
    """The bug the settle works around, as torch 2.13 has it (if a torch fixes it, this
    fails and the workaround can go)."""
    done = _run_pair(tmp_path, [sys.executable], "0")
    assert done.returncode == -6, (done.returncode, done.stderr)
    assert "terminate called without an active exception" in done.stderr
    assert "rank 0 leaves" in done.stdout


@pytest.mark.parametrize("trace", ["0", "1"])
def test_under_the_lab_s_script_runner_the_rank_settles_and_exits_0(tmp_path, trace):
    done = _run_pair(tmp_path, [sys.executable, "-m", "workloads._script"], trace)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "terminate called" not in done.stderr
    assert "rank 0 leaves" in done.stdout


def test_settling_gives_up_after_its_limit_when_a_torch_thread_keeps_running(monkeypatch):
    monkeypatch.setattr(_settle, "torch_threads_running", lambda: True)
    assert _settle.settle(limit_s=0.05) is False
    monkeypatch.setattr(_settle, "torch_threads_running", lambda: False)
    assert _settle.settle(limit_s=0.05) is True


def _spinning_thread(name: bytes, stop: threading.Event) -> threading.Thread:
    """A thread that names itself `name` (its /proc comm) and keeps a CPU busy without the
    GIL (hashlib lets it go for large inputs) until `stop`."""
    named = threading.Event()

    def spin() -> None:
        with open(f"/proc/self/task/{threading.get_native_id()}/comm", "wb") as f:
            f.write(name)
        named.set()
        data = b"x" * (8 << 20)
        while not stop.is_set():
            hashlib.sha256(data).digest()

    thread = threading.Thread(target=spin, daemon=True)
    thread.start()
    assert named.wait(30)
    return thread


def _seen_running(tries: int = 200) -> bool:
    return any(_settle.torch_threads_running() for _ in range(tries))


def test_only_threads_torch_named_count():
    """A busy thread named like torch's (`pt_...`) is seen running; one named otherwise is not."""
    stop = threading.Event()
    other = _spinning_thread(b"not_torch_spin", stop)
    try:
        assert not _seen_running()
        torchlike = _spinning_thread(b"pt_test_spin", stop)
        assert _seen_running()
    finally:
        stop.set()
    other.join(30)
    torchlike.join(30)
    assert _settle.settle(limit_s=30)       # the OS thread ends a moment after join() returns
