"""labctl/runrecord.py: the typed run record, and status.json in and out.

tests/golden/status/*.json were written by labctl before the record existed (commit
876aa0b: a passing lab, a failing rank, a traced hang at the deadline, a kill-node
fault, a Ctrl-C); the record reads each and writes it back byte for byte.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from labctl.outcome import NodeOutcome, NodeState, RunState
from labctl.runrecord import (Checks, Collected, Controller, FailedCheck, FiredFault, FirstFailure,
                           Leftover, RecordDamaged, RunRecord, TraceSummary)
from labctl.trace.model import Mismatch

GOLDEN = Path(__file__).parent / "golden" / "status"


@pytest.mark.parametrize("name", ["passed", "failed", "hang", "fault", "interrupted"])
def test_status_json_of_older_runs_reads_and_writes_back_byte_for_byte(name):
    text = (GOLDEN / f"{name}.json").read_text()
    record = RunRecord.from_json(text)
    assert record.state is RunState(json.loads(text)["state"])
    assert record.to_json() == text


def test_the_golden_records_are_typed_all_the_way_down():
    hang = RunRecord.from_json((GOLDEN / "hang.json").read_text())
    assert isinstance(hang.first_failure, FirstFailure) and hang.first_failure.hang
    assert "all_reduce" in hang.first_failure.collective.text
    assert isinstance(hang.trace, TraceSummary) and hang.trace.ops > 0
    assert all(isinstance(o, NodeOutcome) and o.state is NodeState.STOPPED for o in hang.node_outcomes)
    assert set(hang.stacks) == {0, 1}, "ranks are ints in the record, strings only in JSON"
    fault = RunRecord.from_json((GOLDEN / "fault.json").read_text())
    assert [f.phase for f in fault.faults] == ["begin"] and fault.faults[0].began
    assert fault.first_failure.fault == "kill-node:1@1"
    failed = RunRecord.from_json((GOLDEN / "failed.json").read_text())
    assert failed.rank_errors[1]["exception"] == "ValueError: rank 1 gives up"
    assert isinstance(failed.checks, Checks) and failed.controller.pid > 0


def test_every_field_survives_json():
    record = RunRecord(
        "lab-1", "lab", "k8s", "torchrun", "gloo", 2, 2, 4, RunState.FAILED, "2026-11-25T10:00:00+00:00",
        workdir=None, controller=Controller(12, "host", 345),
        backend_state={"namespace": "labs", "context": "kind"}, collected=Collected(wait=False),
        leftovers=[Leftover(1, 99, "sleep 100")], seconds=12.5, seconds_watched=3.0, signal="SIGTERM",
        notes=["a note"], logs_uncollected=True,
        faults=[FiredFault("kill-rank:1@2", "kill-rank", 1, "begin", "SIGKILL to rank 1", 2.1,
                           note="late")],
        trace=TraceSummary("trace.json", 10, [3], 1, {"rank": 2, "ranks": [2], "text": "rank 2 arrived last ..."}),
        first_failure=FirstFailure(1, 0, -9, signal="SIGKILL", error={"exception": "boom"}, op="barrier",
                                   caller="job.py:14"),
        finished="2026-11-25T10:00:12+00:00", message="rank 1 ...",
        node_outcomes=[NodeOutcome(0, "lab-0", 1, NodeState.FAILED, 11.0, None, "why")],
        rank_exit_codes={1: -9}, rank_errors={1: {"exception": "boom"}}, failed_ranks=[1],
        ranks_without_output=[3], stacks={0: {"file": "a.py", "line": 3}}, checks=Checks(5, 1, 0),
        failed_checks=[FailedCheck("ddp", "loss", 1, "nan")], finalize_seconds=0.5,
        unfinished=["no trace.json"], rank_logs_by_guards=True, extra={"from_the_future": 1})
    again = RunRecord.from_json(record.to_json())
    assert again == record
    assert again.to_dict()["k8s"] == {"namespace": "labs", "context": "kind"}, \
        "the backend's own notes sit under its name, as ever"


@pytest.mark.parametrize("text, why", [
    ("[1, 2]", "expected a JSON object, found a list"),
    ('{"state": "weird"}', "unknown state 'weird'"),
    ('{"state": "passed", "node_outcomes": [{"index": 0}]}', "a node outcome without its index"),
    ('{"state": "failed", "rank_errors": {"x": {"exception": "e"}}}', "keyed by rank numbers"),
    ("{not json", "unreadable"),
])
def test_a_damaged_status_json_is_one_line_not_a_traceback(text, why):
    with pytest.raises(RecordDamaged, match=why):
        RunRecord.from_json(text)


@pytest.mark.parametrize("text, why", [
    ('{"world_size": 1000000000000000000000000000000}', r"'world_size' should be a whole number from 1 to 65,536"),
    ('{"world_size": 1e30}', r"'world_size' should be a whole number from 1 to 65,536 .*found 1e\+30"),
    ('{"world_size": 1000000}', r"'world_size' should be a whole number from 1 to 65,536"),
    ('{"nodes": 0}', r"'nodes' should be a whole number from 1 to 4,096"),
    ('{"nproc_per_node": 1025}', r"'nproc_per_node' should be a whole number from 1 to 1,024"),
    ('{"state": "failed", "rank_exit_codes": {"99999999999": 1}}', "keyed by rank numbers"),
    ('{"state": "failed", "rank_exit_codes": {"-1": 1}}', "keyed by rank numbers"),
    ('{"state": "failed", "failed_ranks": [1e30]}', "'failed_ranks' should hold at most 65,536 rank numbers"),
    ('{"state": "failed", "ranks_without_output": [70000]}', "'ranks_without_output' should hold"),
    ('{"state": "failed", "node_outcomes": [{"index": 5000, "state": "failed"}]}', "'node_outcomes' should hold"),
    ('{"state": "failed", "first_failure": {"rank": 100000}}', "'first_failure.rank' should be a rank number"),
    ('{"state": "failed", "first_failure": {"node": -1}}', "'first_failure.node' should be a node number"),
    ('{"state": "failed", "first_failure": {"ranks": [1, "x"]}}', "'first_failure.ranks' should be a list"),
    ('{"state": "failed", "checks": {"total": 1e30}}', "'checks' should count with whole numbers"),
])
def test_a_size_in_status_json_past_a_lab_s_bounds_is_damage_not_a_loop(text, why):
    """Issue 38: `"world_size": 10^30` made `labctl report --format html` loop for ever
    (10^6: 8.4 s, "999976 more" missing logs). Every size read from the folder is
    bounded as a lab's is (docs/limits.md)."""
    with pytest.raises(RecordDamaged, match=why):
        RunRecord.from_json(text)


def test_the_record_s_bounds_are_the_lab_s():
    from labctl import runrecord as record, spec

    assert (record.MAX_WORLD, record.MAX_TOTAL_NODES, record.MAX_NPROC_PER_NODE) == \
        (spec.MAX_WORLD, spec.MAX_TOTAL_NODES, spec.MAX_NPROC_PER_NODE)


def test_a_status_json_larger_than_the_bound_is_not_read_past_it(tmp_path, monkeypatch):
    from labctl import runrecord as record

    path = tmp_path / "status.json"
    path.write_text('{"state": "passed", "notes": ["' + "x" * 5000 + '"]}')
    monkeypatch.setattr(record, "MAX_RECORD_BYTES", 4096)
    with pytest.raises(RecordDamaged, match="larger than 4 KiB, the most a status.json may be"):
        record.read_bounded(path, "status.json", record.MAX_RECORD_BYTES)
    assert RunRecord.read(path).state is RunState.PASSED     # the default bound: 64 MiB


def test_a_trace_without_a_straggler_or_a_mismatch_writes_what_it_wrote_before():
    """status.json's `trace` gains `straggler` and `mismatch` only when the merge found one."""
    plain = TraceSummary("trace.json", 10, [3], 1)
    assert plain.to_dict() == {"file": "trace.json", "ops": 10, "missing_ranks": [3], "bad_records": 1}
    found = TraceSummary("trace.json", 10, mismatch=Mismatch.from_dict({"rank": 1, "text": "rank 1 called ..."}))
    assert found.to_dict()["mismatch"]["rank"] == 1 and "straggler" not in found.to_dict()
    assert FirstFailure(1, 0, 1).to_dict() == {"rank": 1, "node": 0, "exit_code": 1}
