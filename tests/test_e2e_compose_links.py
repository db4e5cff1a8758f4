"""Shaped links on real containers: a compose lab of 3 nodes, node 2 at 100 mbit.

One lab shared by its assertions (the pair matrix names node 2 and its pairs, bench
busbw across node 2 sits within 20 % of what the model expects from 100 mbit, no
rank can change the shaping, node 2's egress has a class per peer that took its data), and the same lab unshaped, which does not name node 2.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from docker_support import require_compose, require_image
from test_e2e_compose import assert_nothing_left

pytestmark = pytest.mark.docker

RATE_Bps = 100e6 / 8
# 4 MiB: 0.45 s an all_reduce at 100 Mbit/s, so that the median of 8 is the link's, not a
# stalled retransmit's (one in a few iterations on this shared machine)
BENCH = {"ops": ["all_reduce", "all_gather"], "min_bytes": 1 << 20, "max_bytes": 4 << 20,
         "factor": 4, "iters": 8, "warmup_iters": 1, "link_seconds": 0.5}


def up(tmp_path: Path, name: str, links: dict | None, workloads: list) -> tuple[subprocess.CompletedProcess, Path]:
    lab = {"name": name, "backend": "compose", "nodes": 3, "nproc_per_node": 1, "timeout": 400,
           "workloads": workloads, **({"links": links} if links else {})}
    (tmp_path / f"{name}.yaml").write_text(json.dumps(lab))
    out = tmp_path / name
    done = subprocess.run([sys.executable, "-m", "labctl.cli", "up", "-f", str(tmp_path / f"{name}.yaml"),
                           "--out", str(out), "-q"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    return done, out


def report(out: Path) -> dict:
    done = subprocess.run([sys.executable, "-m", "labctl.cli", "report", str(out), "--format", "json"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module", autouse=True)
def _docker_and_image():
    require_compose()
    require_image()


def test_node_2_at_100mbit_is_named_slow_and_bench_across_it_meets_the_model(tmp_path):
    done, out = up(tmp_path, "shaped", {"nodes": {2: "100mbit"}},
                   ["links", {"name": "bench", "options": BENCH}])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    status = json.loads((out / "status.json").read_text())
    data = report(out)

    # the shaping step ran on node 2 only, before the node started
    assert "labctl-shape: node 2: eth0 out 100 Mbit/s, in 100 Mbit/s" in (out / "nodes" / "node-2.log").read_text()
    for node in (0, 1):
        assert "labctl-shape" not in (out / "nodes" / f"node-{node}.log").read_text()

    # the pair matrix names node 2 and its pairs, and the measured links sit near 100 Mbit/s
    matrix = data["links"]
    assert matrix["slow_nodes"] == [2], matrix
    assert matrix["slow_pairs"] == [[0, 2], [1, 2]], matrix
    shaped = [d for d in matrix["directions"] if 2 in (d["src_node"], d["dst_node"])]
    assert len(shaped) == 4
    for d in shaped:
        assert d["configured_Bps"] == RATE_Bps
        assert 0.8 * RATE_Bps < d["p2p_Bps"] < 1.05 * RATE_Bps, d
        assert 0.8 * RATE_Bps < d["tcp_Bps"] < 1.05 * RATE_Bps, d
    assert "**Node 2 is slow**" in done.stdout

    # no rank can change the shaping: no NET_ADMIN anywhere, tc refused
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    (locked,) = [r for r in results if r.get("name") == "shaping_locked"]
    assert locked["ok"] and locked["node"] == 2 and locked["net_admin_in"] == []
    assert "Operation not permitted" in locked["tc"]
    assert set(locked["caps"].values()) == {"0000000000000000"}

    # node 2's egress is shared per peer: the pair matrix's data to node 0 and to node 1 each
    # went through that peer's own htb class, and little through the common one
    (shared,) = [r for r in results if r.get("name") == "egress_shared_per_peer"]
    assert shared["ok"] and shared["node"] == 2, shared
    assert all(sent > 4 << 20 for sent in shared["per_peer_bytes"].values()), shared
    assert shared["common_bytes"] < min(shared["per_peer_bytes"].values()) / 10, shared

    # bench busbw across node 2 (every ring crosses it) within 20 % of the 100 Mbit/s model
    # (3 ranks: each sends to one peer and receives from the other, at the link's rate)
    model = data["bench"]["model"]
    assert model["configured_link_Bps"] == RATE_Bps and model["algorithms"] == "gloo"
    largest = max(r["size_bytes"] for r in data["bench"]["rows"])
    for row in data["bench"]["rows"]:
        if row["size_bytes"] == largest:
            assert 0.8 < row["busbw_over_model"] < 1.2, row
    assert status["state"] == "passed"
    assert_nothing_left(status["run_id"])


def test_the_same_lab_unshaped_does_not_name_node_2(tmp_path):
    done, out = up(tmp_path, "unshaped", None, ["links"])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    matrix = report(out)["links"]
    assert len(matrix["directions"]) == 6
    assert 2 not in matrix["slow_nodes"], matrix
    assert not any("labctl-shape" in p.read_text() for p in (out / "nodes").glob("*.log"))
    assert json.loads((out / "status.json").read_text())["state"] == "passed"
