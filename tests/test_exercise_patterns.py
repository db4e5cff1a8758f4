"""The pattern exercises of `labctl exercise` (issue 51; docs/exercises.md): column_parallel,
pipeline_1f1b, ring_attention and moe_dispatch, each graded on real ranks for values
(against one process), traffic (against the pattern's optimum), schedule where the pattern
has one, waits and deadline.

One lab (2 x 2 local ranks: world sizes 4, 3 and 2) runs each reference (tests/exercises/,
never shipped) and the mistakes that let a lab go on; a starter, which the grade refuses,
has a lab of its own (2 ranks: it ends at its first call). The rules that read the trace's
order and the optimum formulas are checked on hand-made ops below.
"""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import assert_nothing_left, labctl
from labctl import exercise as ex
from labctl import exercise_checks as checks
from workloads._protocol.exercises import EXERCISES, PATTERNS, Call, cases, column_block, traffic

HERE = Path(__file__).resolve().parent / "exercises"
REFERENCES = {name: f"{name}.py" for name in PATTERNS}
MISTAKES = {"gpipe order": ("pipeline_1f1b", "pipeline_gpipe.py"),
            "kv to every rank": ("ring_attention", "ring_attention_pairwise.py"),
            "padded to a capacity": ("moe_dispatch", "moe_padded.py"),
            "padded column blocks": ("column_parallel", "column_parallel_padded.py")}   # honest: passes


@pytest.fixture(scope="module")
def patterns_lab(tmp_path_factory):
    """Every pattern's reference and the pattern mistakes that let the lab go on, in one 2 x 2 lab."""
    out = tmp_path_factory.mktemp("patterns") / "run"
    named = [*REFERENCES.items(), *MISTAKES.values()]
    entries = [ex.entry(name, str(HERE / file)) for name, file in named]
    spec = ex.lab_spec(entries, None, {"out": str(out)}, ex.settings())
    run, grades = ex.check(spec, entries, progress=lambda line: None)
    yield run, {g.file.name: g for g in grades}
    assert_nothing_left(run.status["run_id"])


@pytest.mark.slow
@pytest.mark.parametrize("name", PATTERNS)
def test_each_pattern_s_reference_passes_every_check_on_4_3_and_2_ranks(patterns_lab, name):
    run, grades = patterns_lab
    g = grades[REFERENCES[name]]
    assert g.worlds == [4, 3, 2]
    assert g.passed, ex.text([g], run)
    exercise = EXERCISES[name]
    for world in (4, 3, 2):
        for check in (ex.Check.VALUES, ex.Check.TRAFFIC, ex.Check.WAITS, ex.Check.DEADLINE):
            assert g.cells[(check, world)].ok is True, (check, world, g.cells[(check, world)])
        # the bytes are the trace's, exactly the pattern's optimum (moe: handed to all_to_all_single)
        assert g.cells[(ex.Check.TRAFFIC, world)].text == "1.00x", (world, g.cells[(ex.Check.TRAFFIC, world)])
        assert g.cells[(ex.Check.ONLY_P2P, world)].ok is (True if exercise.only_p2p else None)
        schedule = g.cells.get((ex.Check.SCHEDULE, world))
        assert (schedule.ok if schedule else None) is (True if exercise.schedule else None)
        assert g.cells[(ex.Check.TIME, world)].text == ""              # a pattern races no collective


@pytest.mark.slow
def test_gpipe_s_order_fails_the_1f1b_schedule_with_right_values_and_bytes(patterns_lab):
    run, grades = patterns_lab
    g = grades["pipeline_gpipe.py"]
    for world in (4, 3, 2):
        assert g.cells[(ex.Check.VALUES, world)].ok and g.cells[(ex.Check.TRAFFIC, world)].text == "1.00x"
        assert g.cells[(ex.Check.SCHEDULE, world)].text == "FAIL"
    four = next(f.text for f in g.findings if f.world == 4)
    assert four.startswith("schedule at world size 4: stage 2 held 3 microbatches' activations at once in "
                           "float32, 3 microbatches of 2 x 1 (sent forward, their gradient not yet back), where "
                           "1F1B holds at most n - r = 2: that is GPipe's order"), four
    assert [f.check for f in g.findings] == [ex.Check.SCHEDULE] * 3


@pytest.mark.slow
def test_kv_sent_to_every_rank_is_not_a_ring(patterns_lab):
    _, grades = patterns_lab
    g = grades["ring_attention_pairwise.py"]
    assert [g.cells[(ex.Check.SCHEDULE, w)].text for w in (4, 3, 2)] == ["FAIL", "FAIL", "pass"]   # 2 ranks: a ring
    assert all(g.cells[(ex.Check.TRAFFIC, w)].text == "1.00x" for w in (4, 3, 2))
    said = next(f.text for f in g.findings if f.world == 4)
    assert said.startswith("schedule at world size 4: rank 0 sent to ranks 1, 2, 3 in float32, 1 token a rank, "
                           "head dim 4: in a ring each rank sends its K/V block to its next rank only (rank 1)"), said


@pytest.mark.slow
def test_moe_splits_padded_to_a_capacity_fail_traffic_and_name_uneven_splits(patterns_lab):
    _, grades = patterns_lab
    g = grades["moe_padded.py"]
    assert all(g.cells[(ex.Check.VALUES, w)].ok for w in (4, 3, 2))
    assert all(g.cells[(ex.Check.TRAFFIC, w)].ok is False for w in (4, 3, 2))
    said = next(f.text for f in g.findings if f.world == 4)
    assert said.startswith("traffic at world size 4: the ranks sent 3.7x the optimum"), said
    assert "do you pad every split to a capacity" in said and "input_split_sizes, output_split_sizes" in said


@pytest.mark.slow
def test_column_blocks_padded_to_the_widest_pass_as_padding(patterns_lab):
    run, grades = patterns_lab
    g = grades["column_parallel_padded.py"]
    assert g.passed, ex.text([g], run)
    assert [g.cells[(ex.Check.TRAFFIC, w)].text for w in (4, 3, 2)] == ["1.01x padded", "1.00x padded",
                                                                         "1.00x padded"]


@pytest.mark.slow
def test_a_pattern_s_starter_is_refused_with_the_placeholder_named(tmp_path):
    """The starter raises NotImplementedError where the learner's code goes: one line on
    stderr, and the grade's line says it is the placeholder and where the hints are.
    (Every starter ends so: tests/test_exercise.py checks each one's last statement.)"""
    starter = EXERCISES["ring_attention"].starter
    done = labctl("exercise", "check", "ring_attention", str(starter), "-q", "--nodes", "1", "--nproc-per-node",
                  "2", "--out", str(tmp_path / "run"), timeout=400, cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ring_attention (ring_attention.py): your function raised NotImplementedError: "
                           "pass the K/V blocks round the ring, merging the softmax as they come at "
                           "ring_attention.py:"), last
    assert ("That is the starter's placeholder: write your ring_attention(q, k, v, out) in its place (the "
            "file's docstring holds the contract and the hints)") in done.stdout
    assert "Traceback" not in done.stdout + done.stderr
    status = json.loads((tmp_path / "run" / "status.json").read_text())
    assert status["state"] == "failed"
    assert_nothing_left(status["run_id"])


# ---------------------------------------------------------------- the rules, on hand-made ops

def _op(kind: str, peer: int, begin: int, end: int | None = None, nbytes: int = 40):
    return SimpleNamespace(op=kind, peer=peer, nbytes=nbytes, caller="x.py:3", begin=begin,
                           end=begin if end is None else end)


def _call(exercise: str, rank: int, world: int = 4, label: str = "case 0") -> Call:
    return Call(0, exercise, world, rank, 0, label, True, "", 0, 1, 10, 4)


def _schedule(exercise: str, called: dict, world: int = 4) -> ex.Grade:
    g = ex.Grade(EXERCISES[exercise], HERE / f"{exercise}.py", [world])
    checks.schedule(g, world, [_call(exercise, r, world) for r in range(world)], called)
    return g


def test_1f1b_lets_stage_r_hold_n_minus_r_activations_and_no_more():
    """Stage 0 of 4 sends activation k at time 10k; the gradient of microbatch k comes
    back at 10k + `late`: with late 35 at most 4 are out at once (1F1B), with 45, 5."""
    def stage0(late: int) -> dict:
        ops = [_op("isend", 1, 10 * k) for k in range(8)] + [_op("recv", 1, 10 * k, 10 * k + late) for k in range(8)]
        return {(0, 0): ops}

    assert _schedule("pipeline_1f1b", stage0(35)).cells[(ex.Check.SCHEDULE, 4)].ok is True
    g = _schedule("pipeline_1f1b", stage0(45))
    assert g.cells[(ex.Check.SCHEDULE, 4)].ok is False
    assert "stage 0 held 5 microbatches' activations at once in case 0" in g.findings[0].text
    # a gradient back at the very instant the next activation goes out: back first
    assert _schedule("pipeline_1f1b", stage0(40)).cells[(ex.Check.SCHEDULE, 4)].ok is True
    skipping = _schedule("pipeline_1f1b", {(0, 1): [_op("isend", 3, 0)]})
    assert skipping.findings[0].text.startswith("schedule at world size 4: stage 1 exchanged with rank 3 in case 0")


def test_a_ring_goes_one_way_round():
    right = {(0, r): [_op("isend", (r + 1) % 4, 0)] for r in range(4)}
    assert _schedule("ring_attention", right).cells[(ex.Check.SCHEDULE, 4)].ok is True
    left = {(0, r): [_op("isend", (r - 1) % 4, 0)] for r in range(4)}
    assert _schedule("ring_attention", left).cells[(ex.Check.SCHEDULE, 4)].ok is True
    mixed = {**right, (0, 2): [_op("isend", 1, 0)]}
    (said,) = _schedule("ring_attention", mixed).findings
    assert "some ranks sent to their next rank and others to their previous one" in said.text


def test_each_pattern_s_optimum_by_hand():
    # column_parallel: 3 tokens, d_out 5 over 4 ranks (blocks 2, 1, 1, 1), int64
    assert [column_block(5, 4, r) for r in range(4)] == [2, 1, 1, 1]
    col = traffic("column_parallel", 4, 0, 5, 8, {"tokens": 3, "d_in": 4, "d_out": 5})
    assert (col.rank_most, col.total, col.allowed_total) == (3 * 3 * 2 * 8, 3 * 3 * 5 * 8, 4 * 3 * 3 * 2 * 8)
    # pipeline: 8 microbatches of 2 x 5 float32 (A = 40 B); the first and last stage send one way only
    dims = {"microbatches": 8, "rows": 2, "width": 5}
    assert [traffic("pipeline_1f1b", 4, r, 10, 4, dims).rank_most for r in range(4)] == [320, 640, 640, 320]
    assert traffic("pipeline_1f1b", 4, 0, 10, 4, dims).total == 2 * 3 * 8 * 40
    # ring attention: 3 tokens a rank, head dim 8: K and V on 3 hops
    ring = traffic("ring_attention", 4, 0, 24, 4, {"tokens": 3, "head_dim": 8})
    assert (ring.rank_most, ring.total) == (2 * 3 * 24 * 4, 4 * 2 * 3 * 24 * 4)
    # moe: 4 counts, 5 tokens out, 7 received back, width 4 float32; 20 tokens in all
    moe = traffic("moe_dispatch", 4, 0, 5, 4, {"tokens": 5, "width": 4, "received": 7, "all_tokens": 20})
    assert (moe.rank_most, moe.total) == (4 * 8 + (5 + 7) * 16, 16 * 8 + 2 * 20 * 16)


def test_every_pattern_has_cases_with_their_shapes():
    assert [c.label for c in cases("pipeline_1f1b", 4)] == [
        "float32, 1 microbatch of 2 x 5", "float32, 3 microbatches of 2 x 1",
        "float32, 4 microbatches of 2 x 12", "float32, 8 microbatches of 2 x 5"]
    assert cases("column_parallel", 3)[3].label == "int64 arange, 3 tokens x 4 -> 5 features"
    assert {c.kind for c in cases("moe_dispatch", 2)} == {"random", "one expert", "own expert"}
    assert not any(EXERCISES[name].timed for name in PATTERNS)


def test_a_raise_says_what_it_most_often_means():
    from labctl import exercise_text as words

    column = EXERCISES["column_parallel"]
    # what torch 2.13's gloo says of irecv(out[:, 1:3], peer) (measured)
    assert words.raised_hint("RuntimeError: input tensor has to be contiguous", column).startswith(
        "send/recv need contiguous tensors: a slice across columns (out[:, a:b]) is a strided view")
    assert words.raised_hint("NotImplementedError: gather every rank's columns into out here", column) == (
        "That is the starter's placeholder: write your column_parallel_linear(x, weight, bias, out) in its "
        "place (the file's docstring holds the contract and the hints)")
    assert words.raised_hint("ValueError: rank 1 gives up", column) == ""
