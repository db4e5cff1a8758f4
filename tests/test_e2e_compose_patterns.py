"""A parallelism pattern on real containers (issue 51, docs/patterns.md): `labctl up
--workload mesh --backend compose`, 2 nodes x 2 processes, every node's link shaped at
1 Gbit/s.

mesh exercises the most of the six at once: a 2-D DeviceMesh whose tensor-parallel rows
each sit inside one container and whose data-parallel columns cross them, split by hand
and with DTensor. One lab carries every assertion: both variants match ONE process on
every rank and send the formula's bytes, the report draws the groups and one step's
communication from the trace, and `labctl predict` plays that step at 8 ranks over the
run's own links (no --link), its bytes the formula's. Nothing of the run may be left.

The image is the lab image built from these sources (`require_image`), or the one named
in LABCTL_TEST_IMAGE (a developer's own tag, so that a shared machine's labctl-cpu:latest
is not rebuilt under other people's feet).
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from docker_support import require_compose, require_image
from test_e2e_compose import assert_nothing_left
from workloads import _patterns

pytestmark = pytest.mark.docker
IMAGE = os.environ.get("LABCTL_TEST_IMAGE", "labctl-cpu:latest")


@pytest.fixture(scope="module", autouse=True)
def _docker_and_image():
    require_compose()
    require_image(IMAGE)


def labctl(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "labctl.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_mesh_on_two_containers_matches_one_process_and_predicts_its_step_at_8_ranks(tmp_path: Path):
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "labctl.cli", "up", "--backend", "compose", "--image", IMAGE,
                           "--workload", "mesh", "--nodes", "2", "--nproc-per-node", "2", "--link", "1gbit",
                           "--timeout", "300", "--out", str(out), "-q"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=420)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    status = json.loads((out / "status.json").read_text())
    assert status["state"] == "passed" and len(status["node_outcomes"]) == 2
    for node in (0, 1):                  # each container shaped its own link before it started
        assert f"labctl-shape: node {node}: eth0 out 1 Gbit/s" in (out / "nodes" / f"node-{node}.log").read_text()
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    mine = {(r["name"], r["rank"]): r for r in results if r.get("workload") == "mesh"}
    for variant in ("manual", "dtensor"):
        for rank in range(4):
            match = mine[(f"{variant}-matches-single-process", rank)]
            assert match["ok"] and match["max_diff"] <= 1e-5 and (match["dp"], match["tp"]) == (2, 2), match
            sent = mine[(f"{variant}-bytes-per-step", rank)]
            assert sent["ok"] and sent["unknown_ops"] == [] and sent["groups"]["mesh_tp"] == [rank // 2 * 2,
                                                                                             rank // 2 * 2 + 1]
            assert all(math.isclose(s, 9984, rel_tol=0.01) for s in sent["per_step"]), sent
            # the step's ops as the rank issued them: 3 all_reduces in its row, 6 in its column
            assert [(op, group) for op, group, *_ in sent["ops"]] == [("all_reduce", "mesh_tp")] * 3 + \
                [("all_reduce", "mesh_dp")] * 6, sent["ops"]
    report_md = (out / "report.md").read_text()
    assert "| manual | yes (4/4 ranks) |" in report_md and "| dtensor | yes (4/4 ranks) |" in report_md
    assert "| mesh_dp | 0, 2; 1, 3 |" in report_md and "| mesh_tp | 0, 1; 2, 3 |" in report_md
    step = report_md.split("### manual: one step's communication", 1)[1]
    assert "| mesh_tp | all_reduce | 512 | 0, 1 |" in step and "| mesh_dp | all_reduce |" in step

    # the step at 8 ranks (4 containers of 2) over the run's own links: the rows stay inside a
    # container, each container's 1 Gbit/s carries both columns' rings at once
    predicted = labctl("predict", str(out), "--world-size", "8", "--format", "json")
    assert predicted.returncode == 0, predicted.stderr
    answer = json.loads(predicted.stdout)
    assert answer["links"].startswith("every node: 1 Gbit/s") and answer["from_world_size"] == 4
    want = _patterns.mesh_bytes(512, 4, 2, 2, 8448)
    dp_share = _patterns.ring("all_reduce", 8448, 4)
    for row in answer["rows"]:
        assert row["bytes_per_rank"] == row["formula_bytes_per_rank"] == want and row["ranks_per_node"] == 2
        assert 2 * dp_share / 125e6 * 1e6 <= row["time_us"] <= 2 * dp_share / 125e6 * 1e6 * 1.02 + 2, row
    assert_nothing_left(status["run_id"])
