"""labctl/trace/model.py's typed Diagnosis (issue 48): status.json's
`first_failure.collective`, the same JSON as before, read typed and written back as read."""
from __future__ import annotations

import json
from pathlib import Path

from labctl import trace
from labctl.runrecord import RunRecord
from labctl.trace import Diagnosis, Mismatch, Stuck

GOLDEN = Path(__file__).parent / "golden" / "status"


def test_a_golden_status_json_diagnosis_reads_typed_and_writes_back_as_it_was():
    text = (GOLDEN / "hang.json").read_text()
    stored = json.loads(text)["first_failure"]["collective"]
    d = RunRecord.from_json(text).first_failure.collective
    assert isinstance(d, Diagnosis) and d.rank == 1 and d.source is None
    assert isinstance(d.stuck[0], Stuck) and d.stuck[0].missing == [1] and d.stuck[0].waiting == [0]
    assert d.stuck[0].last == {0: "#1 all_reduce [2]"} and d.stuck[0].targets == [1]
    assert d.to_dict() == stored and list(d.to_dict()) == list(stored)
    assert Diagnosis.from_dict(d.to_dict()) == d


def test_each_diagnosis_source_keeps_its_own_keys_and_round_trips():
    stuck = Stuck(pg="default_pg", seq=2, op="all_reduce", waiting=[0], missing=[1], last={0: "#2 all_reduce [4]"},
                  culprit=1, call="all_reduce", calls={0: {"op": "all_reduce", "caller": "a.py:3"}})
    mismatch = Mismatch(pg="default_pg", seq=1, ranks=[2], rank=2, op="broadcast", caller="a.py:5",
                        differs=["op"], calls={2: {"op": "broadcast"}}, unfinished=[0], text="rank 2 called ...")
    fresh = {
        "trace": Diagnosis(text="t", rank=1, ranks=[1], op="all_reduce", caller="a.py:3", mismatch=mismatch,
                           stuck=[stuck], mismatches=["m"], p2p=["p"]),
        "flight recorder": Diagnosis(text="t", rank=1, ranks=[1], op="all_reduce", stuck=[stuck],
                                     source=trace.model.FLIGHT_RECORDER, no_dump=[3]),
        "stacks": Diagnosis(text="t", ranks=[2, 3], op="new_group", source=trace.model.STACKS),
    }
    keys = {"trace": ["rank", "ranks", "op", "caller", "mismatch", "stuck", "mismatches", "p2p", "text"],
            "flight recorder": ["rank", "ranks", "op", "source", "stuck", "mismatches", "no_dump", "text"],
            "stacks": ["rank", "ranks", "op", "caller", "source", "stuck", "mismatches", "p2p", "text"]}
    for name, d in fresh.items():
        said = d.to_dict()
        assert list(said) == keys[name], name
        back = Diagnosis.from_dict(json.loads(json.dumps(said)))
        assert back == d and back.to_dict() == said, name
    said = fresh["trace"].to_dict()
    assert said["mismatch"]["calls"] == {"2": {"op": "broadcast"}} and said["stuck"][0]["ranks"] == [1]
    assert said["stuck"][0]["text"] == stuck.describe()
    assert Diagnosis.from_dict("not an object") is None and Mismatch.from_dict(None) is None


def test_a_rank_without_op_records_is_not_called_dead():
    """A rank held before its first op (a data loader, a lock) is alive: the words for a
    rank that left no op record do not say it ended (issue 53 item 3)."""
    from labctl.trace.model import Stuck
    st = Stuck(pg="default_pg", seq=1, op="all_reduce", waiting=[0], missing=[1], last={}, silent=[1])
    text = st.describe()
    assert "rank 1 left no op record: it issued none, or ended before writing one" in text, text
    assert "killed" not in text
