"""Replicas and init methods on real containers: `labctl up --backend compose`.

Two replicas of 2 nodes x 1 worker joined through file:// on the shared
volume, running `init_methods` and `replicas`; then a one-replica direct lab
joined through tcp://, where file:// has no shared directory and is skipped.
Nothing of either run (containers, network, volume) may be left.

The image is the lab image built from these sources (`require_image`), or
the one named in LABCTL_TEST_IMAGE (a developer's own tag, so that a shared
machine's labctl-cpu:latest is not rebuilt under other people's feet).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from docker_support import require_compose, require_image
from labctl.rendered import RUN_LABEL

pytestmark = pytest.mark.docker
IMAGE = os.environ.get("LABCTL_TEST_IMAGE", "labctl-cpu:latest")


@pytest.fixture(scope="module", autouse=True)
def _docker_and_image():
    require_compose()
    require_image(IMAGE)


def labctl_up(tmp_path: Path, *args: str):
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "labctl.cli", "up", "--backend", "compose", "--image", IMAGE,
                           "--timeout", "300", "--out", str(out), *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=400)
    status = json.loads((out / "status.json").read_text())
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    return done, status, results


def nothing_left(run_id: str) -> None:
    for what in (["ps", "-a"], ["network", "ls"], ["volume", "ls"]):
        listed = subprocess.run(["docker", *what, "-q", "--filter", f"label={RUN_LABEL}={run_id}"],
                                capture_output=True, text=True, check=True).stdout
        assert listed.strip() == "", f"docker {' '.join(what)} still shows run {run_id}"


def test_two_replicas_meet_through_the_store_and_join_through_the_shared_volume(tmp_path):
    done, status, results = labctl_up(tmp_path, "--replicas", "2", "--nodes", "2", "--nproc-per-node", "1",
                                      "--init-method", "file", "--workload", "init_methods,replicas")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert status["state"] == "passed" and len(status["node_outcomes"]) == 4
    everyone = [(k, r) for k in range(2) for r in range(2)]
    for name in ("lab-joined-through", "join-env", "join-tcp", "join-file", "cross-replica-all_reduce",
                 "within-replica-all_reduce", "hsdp-params-identical-on-all-replicas-and-ranks"):
        got = sorted((x["replica"], x["rank"]) for x in results if x["name"] == name)
        assert got == everyone, name
        assert all(x["ok"] and not x.get("skipped") for x in results if x["name"] == name), name
    joined = {x["store"] for x in results if x["name"] == "lab-joined-through"}
    assert joined == {"FileStore"}
    nothing_left(status["run_id"])


def test_tcp_init_in_containers_and_no_shared_directory_without_file(tmp_path):
    done, status, results = labctl_up(tmp_path, "--nodes", "2", "--nproc-per-node", "1", "--launcher", "direct",
                                      "--init-method", "tcp", "--workload", "init_methods,store")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    joined = [x for x in results if x["name"] == "lab-joined-through"]
    assert [x["url"] for x in joined] == ["tcp://lab-0:29501"] * 2 and all(x["ok"] for x in joined)
    skipped = [x for x in results if x["name"] == "join-file"]
    assert all(x.get("skipped") and "each container has its own" in x["reason"] for x in skipped)
    assert all(x["ok"] for x in results if x["name"] == "store-group-all_reduce")
    nothing_left(status["run_id"])
