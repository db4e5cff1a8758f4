"""Issue 39: a workload is one typed plugin (workloads/_protocol/plugin.py `Workload`,
declared once as `WORKLOAD` in workloads/_report/<name>.py, found by labctl/plugins.py)
with one view model, drawn by renderers that know no workload: report.md
(labctl/draw.py), the page (`View.as_dict`), CSV. Pure and fast."""
from __future__ import annotations

import json

import pytest

from conftest import REPO
from html_support import write_folder
from labctl import draw, html, plugins, report
from labctl.rundir import RunDir
from labctl.reports import hosts
from workloads._protocol import DATA
from workloads._protocol.plugin import (MD, PAGE, BeforeAfter, Csv, Group, Heading, Lines, Matrix, Messages,
                                        Table, Text, Workload)

NAMES = sorted(p.stem for p in (REPO / "workloads" / "_report").glob("*.py") if not p.stem.startswith("_"))


def test_every_report_module_declares_one_plugin_named_as_its_file():
    assert {"bench", "collectives", "ddp", "env", "links", "p2p", "preflight"} <= set(NAMES)
    for name in NAMES:
        found = plugins.plugin(name)
        assert isinstance(found, Workload) and found.name == name, name
    assert plugins.plugin("no_such_workload") is None and plugins.plugin("_views") is None
    assert plugins.plugin("../x") is None and plugins.plugin(5) is None      # a record's name: anything


def test_every_host_part_a_plugin_names_is_one_labctl_has():
    """A plugin describes; what labctl does beyond drawing is the part its `host` names
    (labctl/reports/hosts.py): a name labctl lacks would be a part that silently does nothing."""
    named = {name: plugins.plugin(name).host for name in NAMES if plugins.plugin(name).host}
    assert set(named.values()) <= set(hosts.HOSTS), named
    assert named["bench"] == "bench" and {named[p] for p in ("fsdp", "tp", "pp", "cp", "ep", "mesh")} == {"patterns"}


def test_a_report_module_without_a_plugin_is_named(monkeypatch):
    from workloads._report import env

    monkeypatch.delattr(env, "WORKLOAD")
    with pytest.raises(TypeError, match=r"env.py: WORKLOAD should be a workloads._protocol.plugin.Workload"):
        plugins.plugin("env")


def test_a_workload_s_checks_are_no_ops_where_it_has_none():
    p2p = plugins.plugin("p2p")
    assert p2p.check_options({}, {}) is None and p2p.check_lab(None, {}, {}) is None
    assert hosts.of(p2p).compare is None and hosts.of(p2p).predict is None and p2p.csv is None and p2p.data is None


# ---------------------------------------------------------------- the renderers

HELD = {"shape": [3], "dtype": "float32", "numel": 3, "values": [1.0, 2.5, 3.0]}


def test_each_view_kind_is_drawn_as_markdown():
    text = draw.markdown([
        Heading("Section"),
        Text("a **bold** word"),
        Table("t", ["a", "b"], [[1, None], ["x|y", 2]], "its caption", level=3),
        Table("page title only", ["c"], [[3]]),
        Messages("m", "ping", [0, 1], [{"src": 0, "dst": 1, "hop": 1, "send_op": "send", "recv_op": "recv",
                                         "sent": HELD, "received": HELD}], "sequence"),
        Lines("l", "loss", {"label": "step"}, {"label": "loss"}, [{"name": "rank 0", "points": [[0, 2.0], [1, 0.5]]}]),
        Matrix("x", "matrix", ["node 0", "node 1"], [[None, 1.0], [2.0, None]], [["—", "1"], ["2", "—"]]),
    ])
    blocks = text.split("\n\n")
    assert blocks[:6] == ["## Section", "a **bold** word", "### t", "its caption",
                          "| a | b |\n|---|---|\n| 1 |  |\n| x\\|y | 2 |", "| c |\n|---|\n| 3 |"]
    assert "| 1 | 0 | 1 | send → recv | [1, 2.5, 3] | [1, 2.5, 3] | yes |" in text
    assert "| rank 0 | 2 | 2 | 0.5 | 0.5 | 2 |" in text
    assert "| from \\ to | node 0 | node 1 |\n|---|---|---|\n| node 0 | — | 1 |" in text


def test_families_of_calls_are_one_table_a_row_per_call():
    ranks = [{"rank": r, "before": HELD, "after": {"len": 2, "list": [HELD, HELD]}, "ok": r != 1}
             for r in range(6)]
    text = draw.markdown([Group("all_reduce", [BeforeAfter("c1", "all_reduce · op=SUM", ranks)], "what it does"),
                          Group("barrier", [BeforeAfter("c2", "barrier", [{"rank": 0, "ok": None}])])])
    assert text.startswith("| of | call | ranks | checks passed | before → after |\n|---|")
    rows = text.splitlines()[2:]
    assert rows[0].startswith("| all_reduce | all_reduce · op=SUM | 6 | 5/6 | rank 0: [1, 2.5, 3] → "
                              "[[1, 2.5, 3], [1, 2.5, 3]]; ")
    assert rows[0].endswith("; ... (2 more ranks) |") and rows[1] == "| barrier | barrier | 1 |  | rank 0: — → — |"
    alone = draw.markdown([Text("x"), BeforeAfter("c2", "barrier", [{"rank": 0, "ok": True}])])
    assert alone == "x\n\n| call | ranks | checks passed | before → after |\n|---|---|---|---|\n" \
                    "| barrier | 1 | 1/1 | rank 0: — → — |"
    mixed = draw.markdown([Group("g", [Text("a note"), BeforeAfter("c", "c", [])])])
    assert mixed.startswith("### g\n\na note\n\n| call |")


def test_show_keeps_a_view_to_one_renderer_and_the_page_keeps_markdown_s_bold_as_spans():
    views = [Heading("md only"), Table("both", ["a"], [[1]], id="t"), Text("**page**", id="p", show=PAGE),
             Text("md", show=MD), Group("g", [Text("in md", show=MD), Text("x", id="x")], id="g")]
    assert draw.markdown(views) == "## md only\n\n| a |\n|---|\n| 1 |\n\nmd\n\n### g\n\nin md\n\nx"
    assert draw.page(views) == [
        {"kind": "table", "id": "t", "title": "both", "caption": "", "columns": ["a"], "rows": [[1]]},
        {"kind": "text", "id": "p", "text": "page", "strong": [[0, 4]]},
        {"kind": "group", "id": "g", "title": "g", "caption": "",
         "views": [{"kind": "text", "id": "x", "text": "x", "strong": []}]}]


def test_a_workload_s_csv_is_its_header_and_rows():
    assert draw.csv(Csv(["a", "b"], [[1, None], ["x,y", 2.5]])) == 'a,b\n1,\n"x,y",2.5\n'


# ---------------------------------------------------------------- every workload shows everywhere

def _data(workload: str, rank: int, **fields) -> dict:
    return {"workload": workload, "name": DATA, "rank": rank, "ok": True, **fields}


RESULTS = [
    {"workload": "env", "name": "env", "rank": r, "ok": True, "hostname": f"h{r}", "pid": 10 + r} for r in (0, 1)
] + [
    _data("p2p", 0, call="ping-pong", op="send", peer=1, hop=1, tensor=HELD),
    _data("p2p", 1, call="ping-pong", op="recv", peer=0, hop=1, tensor=HELD),
    _data("collectives", 0, call="all_reduce-SUM", op="all_reduce", reduce_op="SUM", before=HELD, after=HELD),
    _data("collectives", 1, call="all_reduce-SUM", op="all_reduce", reduce_op="SUM", before=HELD, after=HELD),
    {"workload": "collectives", "name": "all_reduce-SUM", "rank": 0, "ok": True},
    _data("ddp", 0, call="manual-training", op="train", run="manual", every=1, local_loss=[1.0, 0.5],
          mean_loss=[1.0, 0.5], params=HELD, param_sum=6.5),
    {"workload": "store", "name": "latency-set", "rank": 0, "ok": True, "count": 10, "time_us_median": 5.0,
     "time_us_p99": 9.0},
]


def test_every_workload_with_records_shows_in_report_md_and_on_the_page(tmp_path):
    run = write_folder(tmp_path / "run", world=2, nodes=1, results=RESULTS)
    text = report.markdown(RunDir.open(run))
    for heading in ("## Where every rank runs (workload env)", "## P2p: every message, sent and received",
                    "## Collectives: what every rank held before and after each call",
                    "## DDP: loss per step and replica agreement", "### store"):
        assert f"\n{heading}\n" in text, heading
    assert text.index("## Where every rank runs") < text.index("## Checks per workload") < text.index("## P2p")
    assert "| 1 | 0 | 1 | send → recv | [1, 2.5, 3] | [1, 2.5, 3] | yes |" in text
    assert "| all_reduce | all_reduce · op=SUM | 2 | 1/1 | rank 0: [1, 2.5, 3] → [1, 2.5, 3]; rank 1:" in text
    sections = {s["workload"]: s["views"] for s in html.page_data(run)["workloads"]}
    assert list(sections) == ["env", "p2p", "collectives", "ddp", "store"]
    assert sections["env"][0]["rows"][1][:1] == [1] and sections["store"][0]["title"] == "store latency"
    assert not any(v["kind"] == "heading" for views in sections.values() for v in views)
    json.dumps(sections)            # the island holds plain JSON
    # what `labctl up` prints is as short as before: the workloads that draw a row per call
    # are named, the rest drawn
    brief = report.markdown(RunDir.open(run), brief=True)
    assert "## P2p" not in brief and "## Collectives" not in brief and "## DDP" not in brief
    assert "What every rank held before and after each call (p2p, collectives, ddp): report.md and report.html." \
        in brief
    assert "### store" in brief and "## Where every rank runs (workload env)" in brief


def test_a_links_run_shows_its_pair_matrix_in_both(tmp_path):
    from test_links_workload import records

    run = write_folder(tmp_path / "run", world=3, nodes=3, results=records())
    text = report.markdown(RunDir.open(run))
    assert "## Links: every node pair" in text and "### Bandwidth matrix, Mbit/s" in text
    (section,) = html.page_data(run)["workloads"]
    assert [v["kind"] for v in section["views"]] == ["table", "matrix", "table", "text"]
    rows = report.render(RunDir.open(run), "csv").splitlines()
    assert rows[0].startswith("src_node,dst_node,p2p_Bps") and len(rows) == 7
