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
from workloads._report import pp as pp_report


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


def gpipe(p: int, m: int, f: float = 1.0, b: float = 2.0) -> dict[int, list[tuple[float, float]]]:
    """GPipe's ideal schedule by hand: stage s runs forward k at (s + k) f, and backward k
    (the last microbatch's first) once the stage after it is done with it."""
    lanes: dict[int, list[tuple[float, float]]] = {s: [] for s in range(p)}
    fwd_end = (p + m - 1) * f
    for s in range(p):
        lanes[s] += [((s + k) * f, (s + k + 1) * f) for k in range(m)]
        lanes[s] += [(fwd_end + (p - 1 - s + k) * b, fwd_end + (p - s + k) * b) for k in range(m)]
    return lanes


def test_the_bubble_from_known_intervals():
    # the ideal GPipe schedule's bubble is the formula's, whatever F and B cost
    for m in (4, 8):
        found = pp_report.bubble(gpipe(4, m))
        assert math.isclose(found.mean, pp_report.formula(4, m)) and math.isclose(found.span, (m + 3) * 3.0)
        assert math.isclose(pp_report.bubble(gpipe(4, m, 3.0, 5.0)).mean, 3 / (m + 3))
    assert math.isclose(pp_report.formula(4, 4), 3 / 7) and math.isclose(pp_report.formula(4, 4, 2), 3 / 11)
    # a lane busy the whole span has none; overlapping intervals count once; idle is span less busy
    found = pp_report.bubble({0: [(0, 10)], 1: [(0, 4), (2, 6)], 2: []})
    assert found.span == 10 and found.idle == {0: 0.0, 1: 0.4, 2: 1.0} and math.isclose(found.mean, 1.4 / 3)
    assert pp_report.bubble({}).mean == 0.0


def test_the_measured_bubble_leaves_out_the_first_step():
    lanes = gpipe(2, 2)
    records = [{"rank": s, "intervals": [[step, s, 0, "F", b + 100 * step, e + 100 * step] for b, e in lanes[s]]
                + ([[0, s, 0, "F", 50, 60]] if s == 0 else [])} for s in range(2) for step in (0, 1)]
    merged = [{"rank": s, "intervals": [iv for r in records if r["rank"] == s for iv in r["intervals"]]}
              for s in range(2)]
    mean, per = pp_report.measured(merged)
    assert len(per) == 2 and per[0] > per[1] and math.isclose(mean, pp_report.formula(2, 2))


def test_the_step_s_window_moves_onto_the_trace_s_clock_and_the_grid_s_rows_are_the_inner_groups():
    from labctl import stepcomm

    results = [{"workload": "mesh", "name": "manual-bytes-per-step", "rank": 1, "ok": True,
                "step_window_us": [1_000_000, 1_002_000], "groups": {"mesh_tp": [0, 1]}}]
    (w,) = stepcomm.windows(results, t0_us=999_000, offsets_ms={"1": 0.5})
    assert (w.variant, w.rank, w.begin, w.end, w.groups) == ("manual", 1, 1_500, 3_500, {"mesh_tp": (0, 1)})
    assert stepcomm.columns_of([0, 1, 2, 3], {"mesh_tp": {(0, 1), (2, 3)}, "mesh_dp": {(0, 2), (1, 3)}}) == 2
    assert stepcomm.columns_of([0, 1, 2, 3], {"default_pg": {(0, 1, 2, 3)}}) == 4


# ---- labctl predict: one step at N ranks (workloads/_report/_patterncost.py) ----------------
def test_a_pipeline_step_and_a_ring_pass_replayed_by_hand():
    from workloads._protocol.replay import Network, replay
    from workloads._report import _patterncost as cost

    net = Network.uniform(3, 100.0)            # a rank a node, 100 B/s: a 100-byte message takes 1 s
    # 3 stages, 2 microbatches: the activations 0 -> 1 -> 2, the gradients back; the ends send half
    gpipe, f1b = cost._pp_schedule(3, 1, 2, 100, gpipe=True), cost._pp_schedule(3, 1, 2, 100, gpipe=False)
    assert len(gpipe.messages) == 8 and gpipe.sent() == [200, 400, 200] == f1b.sent()
    # GPipe: the last stage turns round once both activations came (t = 3), then the gradients
    # follow one another: 3 + 3 = 6 s; 1F1B turns each round as it comes: microbatch 0's
    # gradient leaves stage 2 at 2 while microbatch 1's activation crosses 1 -> 2: 5 s
    assert math.isclose(replay(gpipe, net).seconds, 6.0) and math.isclose(replay(f1b, net).seconds, 5.0)
    # a ring pass: 2 hops, every rank passing on what it received; backwards goes to r - 1
    ring, back = cost._ring_pass(3, 100, 1), cost._ring_pass(3, 100, -1)
    assert len(ring.messages) == 6 and math.isclose(replay(ring, net).seconds, 2.0)
    assert {(m.src, m.dst) for m in back.messages} == {(0, 2), (1, 0), (2, 1)}


def test_a_mesh_step_at_8_ranks_keeps_its_rows_and_its_columns_share_each_node_s_cable():
    from types import SimpleNamespace

    from labctl.links import parse
    from labctl.reports import patterns as patterns_host
    from workloads._protocol.plugin import InputError
    from workloads._report import _patterncost as cost

    ops = [["all_reduce", "mesh_tp", 2, 512, None]] * 3 + [["all_reduce", "mesh_dp", 2, s, None]
                                                            for s in (2048, 128, 2048, 2048, 128, 2048)]
    results = [{"workload": "mesh", "name": "manual-bytes-per-step", "rank": r, "ok": True, "ops": ops,
                "formula": 9984.0, "dp": 2, "tp": 2, "activation_bytes": 512, "shard_param_bytes": 8448}
               for r in range(4)]
    run = SimpleNamespace(path="RUN", results=lambda: results,
                          spec=SimpleNamespace(links=parse({"default": "1gbit"}, 4), nproc_per_node=2))
    (row,) = json.loads(patterns_host.predict(run, 8, fmt="json"))["rows"]
    steps = cost.phases("mesh", "manual", {r["rank"]: r for r in results}, 4, 8)
    assert steps[0].groups == ((0, 1), (2, 3), (4, 5), (6, 7)) and steps[3].groups == ((0, 2, 4, 6), (1, 3, 5, 7))
    want = _patterns.mesh_bytes(512, 4, 2, 2, 8448)                  # 1,536 + 12,672 B
    assert row["bytes_per_rank"] == row["formula_bytes_per_rank"] == want and row["within_1pct"]
    # the tp rows stay on a node (loopback); each node's cable carries both columns' rings at
    # once, so each gets half of it: the dp all_reduces take twice their bytes over the link
    dp_share = _patterns.ring("all_reduce", 8448, 4)
    assert 2 * dp_share / 125e6 * 1e6 <= row["time_us"] <= 2 * dp_share / 125e6 * 1e6 * 1.02 + 2
    with pytest.raises(InputError, match="multiple of 2"):
        patterns_host.predict(run, 7)
    with pytest.raises(InputError, match="--size"):
        patterns_host.predict(run, 8, [1024])
    bare = SimpleNamespace(path="RUN", results=lambda: results, spec=SimpleNamespace(links=None, nproc_per_node=2))
    with pytest.raises(InputError, match="--link"):
        patterns_host.predict(bare, 8)
    assert json.loads(patterns_host.predict(bare, 8, fmt="json", links={"default": "1gbit"}))["rows"][0]["time_us"] == \
        row["time_us"]


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


def formula_at(pattern: str, variant: str, big: int) -> float:
    """The most bytes a rank sends per step at `big` ranks by the pattern's formula, with the
    labs' defaults (docs/patterns.md): what `labctl predict --world-size big` must say."""
    if pattern == "fsdp":                 # P = 8,512 B: no parameter's dim 0 needs padding at 16
        return (_patterns.fsdp2_bytes if variant == "fsdp2" else _patterns.zero1_bytes)(8512, big)
    if pattern == "tp":                   # 16 tokens x d 16 x 4 B, 2 blocks
        return _patterns.tp_bytes(1024, big, 2, variant.endswith("-sp"))
    if pattern == "pp":                   # a middle rank: M = 4, A = 2 rows x 16 x 4 B
        return _patterns.pp_bytes(1, big, 2 if variant == "interleaved" else 1, 4, 128)
    if pattern == "cp":                   # T = 32 tokens, d = 16; train: P = 4,096 B
        return _patterns.cp_bytes(big, 32 / big, 16, backward=variant == "train",
                                  param_bytes=4096 if variant == "train" else 0)
    if pattern == "ep":                   # 16 tokens a rank, each to any expert alike
        return _patterns.ep_bytes(0, [[16 / big] * big] * big, 16)
    return _patterns.mesh_bytes(512, big // 2, 2, 2, 8448)        # mesh: tp 2, A = 8 tokens x 16 x 4 B


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
    # one step's communication, from trace.json: the groups and, per variant, its ops in order
    assert f"### {pattern}: the process groups" in report_md and "| default_pg | 0, 1, 2, 3 |" in report_md
    for variant in variants:
        assert f"### {variant}: one step's communication" in report_md, report_md
    # labctl predict: each variant's step at 16 ranks over 1 Gbit/s links, its bytes the formula's
    done = labctl("predict", str(out), "--world-size", "16", "--link", "1gbit", "--format", "json")
    assert done.returncode == 0, done.stderr
    predicted = {r["variant"]: r for r in json.loads(done.stdout)["rows"]}
    assert set(predicted) == set(variants), predicted
    for variant, row in predicted.items():
        want = formula_at(pattern, variant, 16)
        assert math.isclose(row["bytes_per_rank"], want, rel_tol=0.01), (variant, row, want)
        assert math.isclose(row["formula_bytes_per_rank"], want, rel_tol=0.01) and row["within_1pct"], row
        assert row["world_size"] == 16 and row["n"] == 4 and row["time_us"] > row["time_us_at_run"] > 0, row
        if pattern == "tp":
            # 4 ranks a node: each ring crosses every node's 1 Gbit/s cable once, so the step
            # takes what gloo's algorithms send (its reduce_scatter an all_reduce) over the cable
            assert math.isclose(row["time_us"], row["gloo_bytes_per_rank"] / 125e6 * 1e6, rel_tol=0.02), row
    if pattern == "tp":
        shown = labctl("predict", str(out), "--world-size", "16", "--link", "1gbit")
        assert shown.returncode == 0 and "## One step's communication at world size 16" in shown.stdout
        for bad, says in ((["--world-size", "16"], "--link"), (["--world-size", "16", "--link", "1gbit",
                                                                  "--size", "1MiB"], "--size")):
            refused = labctl("predict", str(out), *bad)
            assert refused.returncode == 2 and says in refused.stderr and "Traceback" not in refused.stderr
            assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    step = report_md.split(f"### {variants[0]}: one step's communication", 1)[1]
    assert "| 1 | " in step, step[:2000]
    if pattern == "mesh":
        assert "| mesh_dp | 0, 2; 1, 3 |" in report_md and "| mesh_tp | 0, 1; 2, 3 |" in report_md
        assert "| mesh_tp | all_reduce | 512 | 0, 1 |" in step and "| mesh_dp | all_reduce |" in step
    if pattern == "pp":
        # each step's gpipe sends: 3 links x 4 microbatches x 2 ways, each from its rank to its peer
        assert step.split("\n\n### ", 1)[0].count("| isend | 128 |") == 24
        assert "| 0 → 1 |" in step and "| 1 → 0 |" in step
        # the measured schedule: the bubble beside the formula, each rank's boxes in order
        assert "### pp: the measured bubble against the formula" in report_md
        assert "| gpipe | 4 | 4 | 10 / 20 |" in report_md and "(p-1)/(m+p-1) = 3/7 = 42.9 %" in report_md
        assert "| 3 | 3 | F0 B0 F1 B1 F2 B2 F3 B3 |" in report_md            # 1F1B's last stage
        for name, records in pp_report.schedules(results).items():
            mean, _ = pp_report.measured(records)
            # sleep-timed work: the sends and Python around it only add idle time (the
            # 5-point bar needs longer work: benchmarks/bubble.py)
            assert pp_report.formula(4, 4, records[0]["stages_per_rank"]) - 0.05 <= mean < 1.0, (name, mean)
    assert_nothing_left(status["run_id"])
