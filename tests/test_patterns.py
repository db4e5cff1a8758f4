"""The parallelism patterns (fsdp, tp, pp, cp, ep, mesh; docs/patterns.md).

The formulas by hand first (pure), then ONE real local lab of 4 ranks per pattern, every
variant in it, carrying all of that pattern's assertions: every rank's check against ONE
process passed within its tolerance (pp: bitwise), and every rank's bytes per step are
the formula's within 1 % (what torch issued, counted by workloads/_patterns.py), and the
report's section says so.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from conftest import assert_nothing_left, labctl
from labctl import backends
from labctl.spec import SpecError
from workloads import _patterns
from workloads._report import _patterns as report


# ---- the formulas -----------------------------------------------------------------------
def test_ring_shares():
    assert _patterns.ring("all_reduce", 1000, 4) == 1500          # 2 (n-1)/n S
    assert _patterns.ring("all_gather", 1000, 4) == 750           # (n-1)/n S
    assert _patterns.ring("reduce_scatter", 1000, 4) == 750
    assert _patterns.ring("all_reduce", 1000, 1) == 0
    with pytest.raises(ValueError):
        _patterns.ring("broadcast", 1, 2)


def test_fsdp_and_zero1_formulas():
    # 2 all_gathers (forward, backward after resharding) + 1 reduce_scatter of P
    assert _patterns.fsdp2_bytes(8512, 4) == 3 * 3 / 4 * 8512 == 19152
    # ZeRO-1 sends what DDP's all_reduce does: 2 (n-1)/n P
    assert _patterns.zero1_bytes(8512, 4) == _patterns.ring("all_reduce", 8512, 4) == 12768
    assert _patterns.fsdp2_bytes(8512, 1) == _patterns.zero1_bytes(8512, 1) == 0


def test_tp_formulas():
    a = 16 * 16 * 4                                              # 16 tokens x d 16 x float32
    assert _patterns.tp_bytes(a, 4, 2, sequence=False) == 3 * 2 * 3 / 4 * a == 4608
    assert _patterns.tp_bytes(a, 4, 2, sequence=True) == 7 * 3 / 4 * a == 5376
    # one block: forward all_reduce only (the input is data) vs all_gather + reduce_scatter
    # forward and the reduce_scatter's mirror backward
    assert _patterns.tp_bytes(a, 2, 1, False) == a and _patterns.tp_bytes(a, 2, 1, True) == 1.5 * a


def test_pp_formula_end_ranks_send_half():
    a = 2 * 16 * 4
    assert [_patterns.pp_bytes(r, 4, 1, 4, a) for r in range(4)] == [4 * a, 8 * a, 8 * a, 4 * a]
    # interleaved: stages r and r + 4; stage 0 sends no gradient, stage 7 no activation
    assert [_patterns.pp_bytes(r, 4, 2, 4, a) for r in range(4)] == [12 * a, 16 * a, 16 * a, 12 * a]
    assert _patterns.pp_bytes(0, 2, 1, 3, 10) == 30


def test_cp_formula():
    assert _patterns.cp_bytes(4, 8, 16) == 2 * 3 * 8 * 16 * 4 == 3072
    assert _patterns.cp_bytes(1, 32, 16) == 0
    # training: the K/V gradients back the same n-1 hops, and the weights' all_reduce
    assert _patterns.cp_bytes(4, 8, 16, backward=True, param_bytes=4096) == 2 * 3072 + 1.5 * 4096 == 12288


def test_ep_formula_counts_the_uneven_splits():
    counts = [[3, 1, 0], [2, 2, 2], [0, 0, 5]]                   # counts[i][j]: rank i's tokens to expert j
    # rank 0 sends away 1, receives 2: 8 x 2 + (2 x 1 + 2) x d x 4
    assert _patterns.ep_bytes(0, counts, 16) == 16 + 4 * 64
    assert _patterns.ep_bytes(1, counts, 16) == 16 + (2 * 4 + 1) * 64
    assert _patterns.ep_bytes(2, counts, 16) == 16 + (0 + 2) * 64


def test_mesh_formula_is_tp_plus_dp():
    a, shard = 8 * 16 * 4, 2 * (64 * 16 + 64 + 16 * 64) // 2 * 4      # 2 blocks, half each
    assert _patterns.mesh_bytes(a, 2, 2, 2, shard) == 3 * 2 * 1 / 2 * a + 2 * 1 / 2 * shard == 9984
    assert _patterns.mesh_bytes(a, 1, 4, 2, shard) == _patterns.tp_bytes(a, 4, 2, False)


def test_variant_names():
    assert _patterns.variants("all", ("a", "b")) == ["a", "b"]
    assert _patterns.variants("b, a", ("a", "b")) == ["b", "a"]
    with pytest.raises(ValueError):
        _patterns.variants("c", ("a", "b"))


def test_a_bad_variant_is_refused_when_the_lab_loads():
    with pytest.raises(SpecError, match="variant: expected all, or one or more of manual, dtensor"):
        backends.from_dict({"workloads": [{"tp": {"variant": "megatron"}}]})
    with pytest.raises(SpecError, match="schedule"):
        backends.from_dict({"workloads": [{"pp": {"schedule": "zb"}}]})
    assert backends.from_dict({"workloads": [{"pp": {"schedule": "gpipe,1f1b"}}]}).workloads[0].options


@pytest.mark.parametrize("entry, says", [
    ({"tp": {"tokens": 10}}, "workloads.tp.options.tokens: expected a multiple of the world size 4"),
    ({"cp": {"tokens": 30}}, "workloads.cp.options.tokens: expected a multiple of the world size 4"),
    ({"mesh": {"tp": 3}}, "workloads.mesh.options.tp: expected a divisor of the world size 4"),
    ({"pp": {"batch": 6}}, "workloads.pp.options.batch: expected a multiple of microbatches (4)"),
])
def test_sizes_that_cannot_split_over_the_ranks_are_refused_when_the_lab_loads(entry, says):
    with pytest.raises(SpecError, match=says.replace("(", r"\(").replace(")", r"\)")):
        backends.from_dict({"nodes": 2, "nproc_per_node": 2, "workloads": [entry]})
    backends.from_dict({"nodes": 1, "nproc_per_node": 2, "workloads": [{"tp": {}}, {"cp": {}}, {"mesh": {}},
                                                                         {"pp": {}}, {"fsdp": {}}, {"ep": {}}]})


def test_the_report_row_per_variant():
    results = [{"workload": "pp", "name": "gpipe-matches-single-process", "rank": r, "ok": True,
                "max_diff": 0.0, "tolerance": 0.0, "bitwise": True} for r in range(2)]
    results += [{"workload": "pp", "name": "gpipe-bytes-per-step", "rank": r, "ok": True, "sent": 512.0 * (r + 1),
                 "formula": 512.0 * (r + 1), "formula_text": "x"} for r in range(2)]
    (row,) = report.rows(results, "pp")
    assert row == ["gpipe", "yes (2/2 ranks)", "0", "0", "yes", "r0 512, r1 1,024 B", "r0 512, r1 1,024 B (x)",
                   "yes (2/2 ranks)"]


# ---- one lab per pattern ------------------------------------------------------------------
# pattern -> (lab shape nodes x nproc, its variants, the tolerance each must meet)
LABS = {
    "fsdp": ((2, 2), ("fsdp2", "zero1"), 1e-5),
    "tp": ((1, 4), ("manual", "dtensor", "manual-sp", "dtensor-sp"), 1e-5),
    "pp": ((2, 2), ("gpipe", "1f1b", "interleaved"), 0.0),
    "cp": ((1, 4), ("full", "causal", "train"), 1e-5),
    "ep": ((2, 2), ("moe",), 1e-6),
    "mesh": ((2, 2), ("manual", "dtensor"), 1e-5),
}


@pytest.mark.slow
@pytest.mark.parametrize("pattern", list(LABS))
def test_one_lab_per_pattern(tmp_path: Path, pattern: str):
    (nodes, nproc), variants, tolerance = LABS[pattern]
    out = tmp_path / "run"
    done = labctl("up", "--quiet", "--workload", pattern, "--nodes", str(nodes), "--nproc-per-node", str(nproc),
                  "--timeout", "240", "--out", str(out))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    status = json.loads((out / "status.json").read_text())
    assert status["state"] == "passed"
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    mine = {(r["name"], r["rank"]): r for r in results if r.get("workload") == pattern}
    for variant in variants:
        for rank in range(4):
            match = mine[(f"{variant}-matches-single-process", rank)]
            assert match["ok"] and match["max_diff"] <= tolerance == match["tolerance"], match
            assert len(match["losses"]) == len(match["reference_losses"])
            if tolerance == 0.0:
                assert match["bitwise"], match
            sent = mine[(f"{variant}-bytes-per-step", rank)]
            assert sent["ok"] and sent["unknown_ops"] == [], sent
            counted = sent["per_step"][sent.get("warmup_steps", 0):]
            want = sent["formula_per_step"][sent.get("warmup_steps", 0):]
            assert counted and all(math.isclose(s, f, rel_tol=0.01) for s, f in zip(counted, want)), sent
    if pattern in ("pp", "cp"):
        # p2p only: the lab's own trace records each send's buffer, which is what a send
        # sends: every rank's sends there are the counter's, step by step, all variants
        events = json.loads((out / "trace.json").read_text())["traceEvents"]
        for rank in range(4):
            traced = sum(e["args"]["bytes"] for e in events if e.get("name") in ("send", "isend")
                         and e["args"].get("rank") == rank)
            counted = sum(sum(mine[(f"{v}-bytes-per-step", rank)]["sends_per_step"]) for v in variants)
            assert traced == counted, (rank, traced, counted)
    report_md = (out / "report.md").read_text()
    assert f"| {variants[0]} | yes (4/4 ranks) |" in report_md, report_md
    assert_nothing_left(status["run_id"])
