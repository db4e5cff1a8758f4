"""Every rank's stack at a hang: at the deadline and on demand (`labctl stacks`),
for a user script that knows nothing of labctl. Real processes and containers."""
from __future__ import annotations

import json
import subprocess
import time

import pytest

from conftest import LABCTL, REPO, assert_nothing_left, labctl, processes_of_run
from docker_support import require_compose, require_image
from labctl import logs

HANG = """
import time, torch.distributed as dist
dist.init_process_group("gloo")
def sleep_forever():
    print("sleeping", flush=True)
    time.sleep(600)
if dist.get_rank() == 1:
    sleep_forever()
dist.barrier()
"""
DUMP = """\
Thread 0x00007f1 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 320 in wait

Current thread 0x00007f2 (most recent call first):
  File "/v/site-packages/torch/distributed/distributed_c10d.py", line 5356 in barrier
  File "/v/site-packages/torch/distributed/c10d_logger.py", line 83 in wrapper
  File "/tmp/job.py", line 5 in wait_all
  File "/tmp/job.py", line 9 in <module>
  File "<frozen runpy>", line 88 in _run_code
  File "/w/workloads/_script.py", line 23 in main
""".splitlines()


def test_a_dump_names_the_innermost_own_frame_and_the_collective():
    tracker = logs.StackTracker()
    for line in ["before", *DUMP, "after"]:
        tracker.feed(line)
    assert tracker.last == DUMP
    assert logs.where_stuck(tracker.last) == {"file": "/tmp/job.py", "line": 5,
                                               "function": "wait_all", "call": "barrier"}


def _check_stacks(out, user_script):
    status = json.loads((out / "status.json").read_text())
    where = status["stacks"]
    assert where["1"]["function"] == "sleep_forever" and where["1"]["file"] == str(user_script)
    assert where["0"]["call"] == "barrier"
    assert "sleep_forever" in (out / "stacks" / "rank-1.txt").read_text()
    return status


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["torchrun", "direct"])
def test_the_deadline_takes_every_ranks_stack_before_stopping(tmp_path, write_script, launcher):
    script = write_script(HANG)
    out = tmp_path / "run"
    done = labctl("up", "--script", str(script), "--nodes", "2", "--nproc-per-node", "1",
                  "--launcher", launcher, "--timeout", "25", "--out", str(out), timeout=300)
    assert done.returncode == 1
    status = _check_stacks(out, script)
    assert status["state"] == "timeout"
    assert "Where each rank was" in done.stdout and "sleep_forever" in done.stdout
    assert_nothing_left(status["run_id"])


@pytest.mark.slow
def test_labctl_stacks_asks_a_live_lab_without_stopping_it(tmp_path, write_script):
    script = write_script(HANG)
    out = tmp_path / "run"
    proc = subprocess.Popen([*LABCTL, "up", "--script", str(script), "--nodes", "2",
                             "--nproc-per-node", "1", "--out", str(out)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if out.exists() and any("sleeping" in p.read_text() for p in (out / "nodes").glob("*.log")):
                break
            time.sleep(0.3)
        time.sleep(2)                                  # rank 0 reaches its barrier
        run_id = json.loads((out / "status.json").read_text())["run_id"]
        before = sorted(processes_of_run(run_id))
        done = labctl("stacks", str(out), timeout=120)
        assert done.returncode == 0, done.stderr
        assert "sleep_forever" in done.stdout and "barrier" in done.stdout
        assert (out / "stacks" / "rank-0.txt").is_file()
        assert sorted(processes_of_run(run_id)) == before, "asking must not stop anything"
        assert proc.poll() is None
    finally:
        proc.terminate()
        proc.communicate(timeout=60)
    assert_nothing_left(run_id)


@pytest.mark.docker
def test_stacks_at_the_deadline_on_compose(tmp_path, write_script):
    require_compose()
    require_image()
    script = write_script(HANG)
    out = tmp_path / "run"
    done = labctl("up", "--backend", "compose", "--script", str(script), "--nodes", "2",
                  "--nproc-per-node", "1", "--timeout", "30", "--out", str(out), timeout=300)
    assert done.returncode == 1, done.stderr
    status = json.loads((out / "status.json").read_text())
    assert status["state"] == "timeout"
    where = status["stacks"]
    assert where["1"]["function"] == "sleep_forever" and where["0"]["call"] == "barrier"
