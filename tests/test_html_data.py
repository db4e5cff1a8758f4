"""labctl/html/data.py, `page_data(run folder)`: the page's one reader of the run folder,
on folders made by hand (tests/html_support.py). No browser: what the JSON island holds."""
from __future__ import annotations

import json
from pathlib import Path

from html_support import write_folder
from labctl import html, report
from labctl.rundir import RunDir
from workloads._protocol import DATA


def _held(*values: float) -> dict:
    return {"shape": [len(values)], "dtype": "float32", "numel": len(values), "values": list(values)}


def _good(world: int = 2) -> list[dict]:
    out = []
    for r in range(world):
        out.append({"workload": "collectives", "name": "all_reduce-SUM", "rank": r, "ok": True})
        out.append({"workload": "collectives", "name": DATA, "rank": r, "ok": True, "call": "all_reduce-SUM",
                    "op": "all_reduce", "before": _held(float(r)), "after": _held(1.0)})
    return out


FORGED = [  # one wrong type in a known field each: what a script's @@labctl-result line may say
    {"workload": "collectives", "name": DATA, "rank": 0, "ok": True, "call": "forged-group", "op": "all_reduce",
     "group": 5, "before": _held(1.0), "after": _held(1.0)},
    {"workload": "collectives", "name": DATA, "rank": 1, "ok": True, "call": "forged-values", "op": "all_reduce",
     "before": {"values": 7}, "after": None},
    {"workload": "p2p", "name": DATA, "rank": 0, "ok": True, "call": "ping-pong", "op": "send", "peer": [1],
     "hop": 1, "tensor": _held(1.0)},
    {"workload": "ddp", "name": DATA, "rank": 0, "ok": True, "call": "c", "op": "train", "run": "ddp",
     "local_loss": 7},
    {"workload": "env", "name": "workload_done", "rank": 0, "ok": True, "seconds": "abc"},
    {"workload": "env", "name": "x", "rank": "zero", "ok": True},
    {"workload": "env", "name": "y", "rank": 1, "ok": "no"},
    {"workload": "env", "name": "z", "rank": 1, "ok": True, "skipped": True, "reason": {"why": 1}},
]


def _with_forged(tmp_path: Path) -> Path:
    run = write_folder(tmp_path / "run", world=2, nodes=1, results=_good())
    with open(run / "results.jsonl", "a") as f:
        for record in FORGED:
            f.write(json.dumps(record) + "\n")
        f.write("[" * 100_000 + "\n")                  # nested past Python's recursion limit
    return run


def test_a_record_with_a_wrong_type_in_a_known_field_is_left_out_and_named(tmp_path):
    """Issue 38: one forged `@@labctl-result` line (`"group": 5`) blanked the whole page.
    Each bad record is now a problem naming its line and field; every good one is drawn."""
    run = _with_forged(tmp_path)
    data = html.page_data(run)
    said = [p for p in data["problems"] if "results.jsonl" in p]
    assert len(said) == len(FORGED) + 1, said
    assert "results.jsonl:5: skipped rank 0's record collectives/data: 'group' should be a list of rank " \
           "numbers or null, found a number" in said[0], said
    assert "'before' should be what a rank held" in said[1] and "'peer' should be a rank number" in said[2]
    assert "'local_loss' should be" in said[3] and "'seconds' should be a finite number" in said[4]
    assert "skipped a record env/x: 'rank' should be a rank number" in said[5]
    assert "'ok' should be true or false" in said[6] and "'reason' should be a string" in said[7]
    assert "garbled result line" in said[8] and "recursion" in said[8]
    (section,) = data["workloads"]
    assert section["workload"] == "collectives"
    (family,) = [v for v in section["views"] if v["kind"] == "group"]
    assert [v["call"] for v in family["views"]] == ["all_reduce-SUM"]
    assert data["checks"]["per_workload"][0]["passed"] == 2
    # report.md, from the same records, is written too (`seconds: "abc"` stopped it)
    text = report.markdown(RunDir.open(run))
    assert text.startswith("# Lab lab: PASSED") and "| collectives | 2 | 2 | 0 | 0 |" in text


def test_a_page_whose_records_are_all_good_names_no_problem(tmp_path):
    run = write_folder(tmp_path / "run", world=2, nodes=1, results=_good())
    assert html.page_data(run)["problems"] == []
