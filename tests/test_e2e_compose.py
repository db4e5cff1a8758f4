"""End to end through the CLI: `labctl up --backend compose` as a user runs it.

A passing default lab (2 nodes x 2 workers, all workloads) and a lab whose
rank 1 exits 3: the failure is named, the logs stay, and neither containers
nor the network of either run are left behind.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from docker_support import REPO, require_compose, require_image
from labctl.rendered import RUN_LABEL

pytestmark = pytest.mark.docker


def labctl_up(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict, Path]:
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "labctl.cli", "up", "--backend", "compose",
                           "--out", str(out), *args], cwd=tmp_path, capture_output=True,
                          text=True, timeout=400)
    status = json.loads((out / "status.json").read_text())
    return done, status, out


def assert_nothing_left(run_id: str) -> None:
    for what in (["ps", "-a"], ["network", "ls"]):
        listed = subprocess.run(["docker", *what, "-q", "--filter", f"label={RUN_LABEL}={run_id}"],
                                capture_output=True, text=True, check=True).stdout
        assert listed.strip() == "", f"docker {' '.join(what)} still shows run {run_id}"
    names = subprocess.run(["docker", "network", "ls", "--format", "{{.Name}}"],
                           capture_output=True, text=True, check=True).stdout
    assert run_id not in names


@pytest.fixture(scope="module", autouse=True)
def _docker_and_image():
    require_compose()
    require_image()


def test_default_lab_passes_on_compose(tmp_path):
    done, status, out = labctl_up(tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert status["state"] == "passed" and status["backend"] == "compose"
    assert status["world_size"] == 4 and status["checks"]["failed"] == 0
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert {r["rank"] for r in results} == {0, 1, 2, 3}
    done_ranks = {r["rank"] for r in results if r.get("name") == "workload_done"}
    assert done_ranks == {0, 1, 2, 3}
    for rank in range(4):
        assert (out / "ranks" / f"rank-{rank}.log").stat().st_size > 0
    for node in range(2):
        assert (out / "nodes" / f"node-{node}.log").stat().st_size > 0
    rendered = (out / "rendered" / "compose.yaml").read_text()
    assert f"name: {status['run_id']}" in rendered
    assert_nothing_left(status["run_id"])


FAILING = """\
import os, sys, time
import torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
print(f"rank {rank} of {dist.get_world_size()} on {os.uname().nodename}", flush=True)
if rank == 1:
    sys.exit(3)
time.sleep(120)      # the others would wait: labctl must stop them
"""


def test_failing_rank_is_named_logs_kept_and_nothing_left(tmp_path):
    (tmp_path / "fail.py").write_text(FAILING)
    done, status, out = labctl_up(tmp_path, "--script", "fail.py", "--name", "failing",
                                  "--nodes", "2", "--nproc-per-node", "2")
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert status["state"] == "failed"
    assert 1 in status["failed_ranks"]
    assert status["first_failure"]["rank"] == 1 and status["first_failure"]["exit_code"] == 3
    assert "rank 1" in done.stderr or "rank(s): 1" in done.stderr
    assert "rank 1 of 4 on failing-0" in (out / "ranks" / "rank-1.log").read_text()
    assert "rank 3 of 4 on failing-1" in (out / "ranks" / "rank-3.log").read_text()
    assert_nothing_left(status["run_id"])
    # `labctl down` afterwards has nothing to do, and says so.
    down = subprocess.run([sys.executable, "-m", "labctl.cli", "down", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert down.returncode == 0 and "nothing left" in down.stdout


HANGING = """\
import time
import torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
print(f"rank {rank} joined", flush=True)
if rank == 1:
    print("hanging", flush=True)
    time.sleep(600)
dist.barrier()
"""


def test_down_after_labctl_was_killed_saves_every_log_then_removes_the_lab(tmp_path):
    """kill -9 of `labctl up` while rank 1 hangs: the containers run on; `labctl down`
    saves both nodes' logs, writes the run down as abandoned, then removes everything."""
    (tmp_path / "hang.py").write_text(HANGING)
    out = tmp_path / "run"
    up = subprocess.Popen([sys.executable, "-m", "labctl.cli", "up", "--backend", "compose",
                           "--script", "hang.py", "--name", "hang", "--nodes", "2",
                           "--nproc-per-node", "1", "--out", str(out)], cwd=tmp_path,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    run_id = None
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            if run_id is None and (out / "status.json").is_file():
                run_id = json.loads((out / "status.json").read_text())["run_id"]
            if run_id is not None and "hanging" in _docker_logs(run_id, "hang-1"):
                break
            assert up.poll() is None, "labctl up ended by itself"
            time.sleep(1)
        else:
            pytest.fail("rank 1 never printed 'hanging'")
        os.kill(up.pid, signal.SIGKILL)
        up.wait(timeout=30)
        assert json.loads((out / "status.json").read_text())["state"] == "running"
        down = subprocess.run([sys.executable, "-m", "labctl.cli", "down", str(out)], cwd=tmp_path,
                              capture_output=True, text=True, timeout=180)
        assert down.returncode == 0, down.stdout + down.stderr
        assert down.stdout.startswith(f"saved the logs into {out}")
        assert "removed 2 container(s) and 1 network(s)" in down.stdout
        assert "[rank1]:hanging" in (out / "nodes" / "node-1.log").read_text()
        assert "[rank0]:rank 0 joined" in (out / "nodes" / "node-0.log").read_text()
        assert "hanging" in (out / "ranks" / "rank-1.log").read_text()
        status = json.loads((out / "status.json").read_text())
        assert status["state"] == "abandoned" and status["finished"]
        assert [n["state"] for n in status["node_outcomes"]] == ["stopped", "stopped"]
        assert (out / "report.md").read_text().startswith("# Lab hang: ABANDONED")
        assert_nothing_left(run_id)
    finally:
        if up.poll() is None:
            os.kill(up.pid, signal.SIGKILL)
        if run_id is not None:
            subprocess.run([sys.executable, "-m", "labctl.cli", "down", "--discard-logs", str(out)],
                           cwd=tmp_path, capture_output=True, timeout=120)


def _docker_logs(run_id: str, service: str) -> str:
    ids = subprocess.run(["docker", "ps", "-aq", "--filter", f"label={RUN_LABEL}={run_id}",
                          "--filter", f"label=com.docker.compose.service={service}"],
                         capture_output=True, text=True).stdout.split()
    if not ids:
        return ""
    logs = subprocess.run(["docker", "logs", ids[0]], capture_output=True, text=True)
    return logs.stdout + logs.stderr


def test_bench_measures_between_containers(tmp_path):
    """The bench workload on compose: busbw rows, a link measured across the
    lab network (not loopback), plots in the run folder."""
    (tmp_path / "lab.yaml").write_text(json.dumps({
        "nodes": 2, "nproc_per_node": 1,
        "workloads": [{"name": "bench", "options": {
            "ops": ["all_reduce", "pingpong"], "min_bytes": 1024, "max_bytes": 65536,
            "factor": 8, "iters": 3, "warmup_iters": 1, "link_bytes": 8 << 20}}]}))
    done, status, out = labctl_up(tmp_path, "-f", "lab.yaml")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    rows = [r for r in results if r.get("name") == "all_reduce" and "busbw_GBps" in r]
    assert [r["size_bytes"] for r in rows] == [1024, 8192, 65536]
    assert all(r["wrong"] == 0 and r["busbw_GBps"] > 0 for r in rows)
    links = [r for r in results if r.get("name") == "link"]
    assert links and not any(str(r.get("address", "")).startswith("127.") for r in links)
    assert (out / "bench_busbw.png").is_file() and (out / "bench_latency.png").is_file()
    assert_nothing_left(status["run_id"])
