"""`labctl preflight` on real containers: a 2x1 compose lab passes every check,
and a lab whose MASTER_ADDR names a host that does not exist fails the named
`dns` check on every node, fast, with nothing left behind.

The unresolvable name is made the way a wrong Service name or a typo makes it
on a cluster: node 0's address in the placement (`container_placement`'s
`master_addr`) names a host no DNS knows, so the containers' own resolver
answers NXDOMAIN.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from docker_support import REPO, image_exists, require_compose, require_image
from labctl import lab
from labctl.backends.compose.backend import ComposeBackend
from labctl.backends.containers import container_placement
from labctl.rendered import RUN_LABEL
from labctl.spec import from_dict

pytestmark = pytest.mark.docker
IMAGE = os.environ.get("LABCTL_TEST_IMAGE", "labctl-cpu:latest")


@pytest.fixture(scope="module", autouse=True)
def _docker_and_image():
    require_compose()
    if IMAGE == "labctl-cpu:latest":
        require_image()
    elif not image_exists(IMAGE):
        pytest.fail(f"LABCTL_TEST_IMAGE={IMAGE} does not exist", pytrace=False)


def assert_nothing_left(run_id: str) -> None:
    for what in (["ps", "-a"], ["network", "ls"]):
        listed = subprocess.run(["docker", *what, "-q", "--filter", f"label={RUN_LABEL}={run_id}"],
                                capture_output=True, text=True, check=True).stdout
        assert listed.strip() == "", f"docker {' '.join(what)} still shows run {run_id}"


def test_preflight_passes_on_compose_2x1(tmp_path):
    out = tmp_path / "pf"
    done = subprocess.run([sys.executable, "-m", "labctl.cli", "preflight", "--backend", "compose",
                           "--nodes", "2", "--nproc-per-node", "1", "--image", IMAGE,
                           "--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for row in ("| node 1 -> node 0 | dns | pass | lab-0 -> ", "| node 1 -> node 0 | port | pass | lab-0:29500",
                "| node 1 -> node 0 | clock | pass |", "| node 0 <-> node 1 | all_reduce | pass |",
                "| node 0 <-> node 1 | p2p | pass |", "| node 1 | shm | pass | 1024 MiB"):
        assert row in done.stdout, done.stdout
    status = json.loads((out / "status.json").read_text())
    assert status["state"] == "passed" and status["backend"] == "compose"
    assert_nothing_left(status["run_id"])


class NodeZeroNowhere(ComposeBackend):
    """Compose, with node 0's address a name that no resolver knows."""

    def placement(self, spec, run_folder=None):
        return container_placement(spec, "compose", master_addr="lab-nowhere-0")


def test_a_master_addr_that_does_not_resolve_fails_the_dns_check_fast(tmp_path):
    spec = from_dict({"backend": "compose", "nodes": 2, "nproc_per_node": 1, "image": IMAGE,
                      "workloads": [{"name": "preflight", "options": {"connect_timeout": 5}}]})
    started = time.monotonic()
    run = lab.preflight(spec, out=str(tmp_path / "pf"), progress=lambda line: None,
                        backend=NodeZeroNowhere())
    took = time.monotonic() - started
    assert run.status["state"] == "failed"
    results = [json.loads(line) for line in (Path(run.path) / "results.jsonl").read_text().splitlines()]
    dns = {r["node"]: r for r in results if r.get("name") == "dns"}
    assert set(dns) == {0, 1} and not any(r["ok"] for r in dns.values()), dns
    assert "MASTER_ADDR lab-nowhere-0 does not resolve on lab-1" in dns[1]["detail"]
    port = [r for r in results if r.get("name") == "port" and r.get("node") == 1]
    assert port and not port[0]["ok"] and "does not resolve" in port[0]["detail"]
    assert not [r for r in results if r.get("name") in ("clock", "p2p")]
    report = (Path(run.path) / "report.md").read_text()
    assert "| node 1 -> node 0 | dns | FAIL | MASTER_ADDR lab-nowhere-0 does not resolve" in report
    assert took < 150, f"took {took:.0f} s: the failure must not wait for a deadline"
    assert_nothing_left(run.status["run_id"])
