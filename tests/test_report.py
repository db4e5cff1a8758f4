"""labctl/report.py: report.md, the JSON and CSV reports, from run folders made by hand
(tests/html_support.py: write_folder), and `labctl report` on damaged folders."""
from __future__ import annotations

import json
import re
import time

from conftest import labctl
from html_support import write_folder
from labctl import report
from labctl.rundir import RunDir
from workloads._protocol import DATA


def test_a_world_size_past_the_bound_is_one_line_not_a_hang(tmp_path):
    """Issue 38: status.json's `"world_size": 10^30` made `labctl report RUN --format html`
    run for ever (10^6: 8.4 s and "999976 more" missing logs listed)."""
    run = write_folder(tmp_path / "run", world=2, nodes=1)
    meta = json.loads((run / "status.json").read_text())
    for world in (10 ** 30, 10 ** 6):
        meta["world_size"] = world
        (run / "status.json").write_text(json.dumps(meta))
        started = time.monotonic()
        done = labctl("report", str(run), "--format", "html", timeout=120)
        assert done.returncode == 0, done.stderr
        assert "note: status.json: RecordDamaged: 'world_size' should be a whole number from 1 to 65,536" \
            in done.stderr, done.stderr
        assert "more" not in done.stderr and time.monotonic() - started < 30
        done = labctl("report", str(run), timeout=120)
        assert done.returncode == 2 and done.stdout == "", done.stdout
        assert done.stderr.count("\n") == 1 and done.stderr.startswith(f"error: {run}/status.json: 'world_size'")


# ---------------------------------------------------------------- a rank's text, shown not obeyed

HOSTILE = "bad \x1b[31mRED\x1b[0m bell\x07 \x1b]0;title\x07 csi\x9b2J \u202eesrever"
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def test_visible_writes_every_control_character_out():
    from workloads._protocol import one_line, visible

    assert visible(HOSTILE) == ("bad \\x1b[31mRED\\x1b[0m bell\\x07 \\x1b]0;title\\x07 csi\\x9b2J "
                                "\\u202eesrever")
    assert visible("a\nb\tc\r", keep="\n\t") == "a\nb\tc\\x0d" and visible(None) == ""
    assert one_line("x\n\x1b[2J  y", 8) == "x \\x1b[2J"[:8]


def test_report_md_shows_a_rank_s_control_characters_as_text(tmp_path):
    """Issue 38: ANSI escapes in a rank's exception (and a check's detail, a record's
    name) reached report.md, and with it the terminal, raw."""
    run = write_folder(tmp_path / "run", world=2, nodes=1, state="failed",
                       first_failure={"rank": 1, "node": 0, "exit_code": 1,
                                      "error": {"exception": f"ValueError: {HOSTILE}"}},
                       rank_exit_codes={"1": 1}, rank_errors={"1": {"exception": f"ValueError: {HOSTILE}"}},
                       message=f"rank 1 failed: {HOSTILE}",
                       results=[{"workload": "env", "name": f"check {HOSTILE}", "rank": 0, "ok": False,
                                 "detail": HOSTILE, "reason": None}])
    text = report.markdown(RunDir.open(run))
    assert not CONTROL.search(text), repr(CONTROL.search(text))
    assert text.count("\\x1b[31mRED") == 5 and "\\u202eesrever" in text      # message, first failure,
    assert "\n## Failed checks\n" in text                                    # rank error, check, detail


def test_the_terminal_gets_a_rank_s_exception_as_text_not_escapes(tmp_path):
    """A real lab whose rank raises an exception full of escapes: `labctl up`'s report, its
    first-failure line and report.md show them as text (`\\x1b[31m`), never raw."""
    script = tmp_path / "ansi.py"
    script.write_text("import os\nif os.environ['RANK'] == '1':\n"
                      f"    raise ValueError({HOSTILE!r})\n")
    out = tmp_path / "run"
    done = labctl("up", "--script", str(script), "--nodes", "1", "--nproc-per-node", "2", "--timeout", "60",
                  "--out", str(out), timeout=300, cwd=tmp_path)
    assert done.returncode == 1, done.stderr[-2000:]
    for text in (done.stdout, done.stderr, (out / "report.md").read_text()):
        assert not CONTROL.search(text), repr(CONTROL.search(text))
        assert "ValueError: bad \\x1b[31mRED\\x1b[0m bell\\x07 \\x1b]0;title\\x07" in text, text[-2000:]
    (line,) = [x for x in done.stderr.splitlines() if x.startswith("error: ")]
    assert line.startswith("error: lab failed: rank 1 on node 0 exited with code 1: ValueError: bad \\x1b[31m")


# ---------------------------------------------------------------- report.py's own tables

RESULTS = [
    {"workload": "env", "name": "env", "rank": 0, "ok": True, "hostname": "h0"},
    {"workload": "p2p", "name": "ping-pong", "rank": 0, "ok": True},
    {"workload": "p2p", "name": "ping-pong", "rank": 1, "ok": False, "detail": "got [1.0], expected [2.0]"},
    {"workload": "p2p", "name": DATA, "rank": 1, "ok": True, "call": "ping-pong", "op": "recv", "peer": 0},
    {"workload": "p2p", "name": "nccl-only", "rank": 0, "ok": True, "skipped": True, "reason": "gloo"},
    {"workload": "p2p", "name": "nccl-only", "rank": 1, "ok": True, "skipped": True, "reason": "gloo"},
    {"workload": "p2p", "name": "workload_done", "rank": 0, "ok": True, "seconds": 1.5},
    {"workload": "p2p", "name": "workload_done", "rank": 1, "ok": False, "seconds": 2.25},
    {"workload": "no-such-workload", "name": "x", "rank": 0, "ok": True},
]


def test_the_checks_per_workload_count_checks_not_data_and_the_slowest_rank():
    (env, p2p, other) = report.workload_summary(RESULTS)
    assert env == {"workload": "env", "checks": 1, "passed": 1, "failed": 0, "skipped": 0, "ranks": 1,
                   "seconds": 0.0}
    assert p2p == {"workload": "p2p", "checks": 4, "passed": 1, "failed": 1, "skipped": 2, "ranks": 2,
                   "seconds": 2.25}
    assert other["workload"] == "no-such-workload" and other["passed"] == 1
    assert report.skipped(RESULTS) == [{"workload": "p2p", "name": "nccl-only", "reason": "gloo", "ranks": [0, 1]}]


def test_hooks_come_in_the_order_their_workloads_first_appear_and_unknown_ones_have_none():
    assert [name for name, _ in report.hooks_for(RESULTS)] == ["env", "p2p"]
    assert [name for name, _ in report.hooks_for(list(reversed(RESULTS)))] == ["p2p", "env"]
    assert report.hooks_for([{"workload": 5}, {"name": "no workload"}]) == []


def test_report_md_names_the_failed_check_its_log_and_no_page_before_one_is_written(tmp_path):
    run = write_folder(tmp_path / "run", world=2, nodes=1, state="failed", results=RESULTS,
                       first_failure={"rank": 1, "node": 0, "exit_code": None, "check": "p2p/ping-pong"},
                       message="rank 1 failed check p2p/ping-pong")
    text = report.markdown(RunDir.open(run))
    assert text.startswith("# Lab lab: FAILED\n")
    assert "**rank 1 failed check p2p/ping-pong**" in text
    assert f"| p2p | ping-pong | 1 | got [1.0], expected [2.0] | {run}/ranks/rank-1.log |" in text
    assert "| p2p | nccl-only | gloo | 0, 1 |" in text
    assert f"**First failure: rank 1 on node 0 failed check p2p/ping-pong** — log: {run}/ranks/rank-1.log" in text
    assert "Page:" not in text
    (run / "report.html").write_text("")
    assert f"Page: {run}/report.html" in report.markdown(RunDir.open(run))


def test_a_fault_and_the_nodes_ends_share_one_clock(tmp_path):
    run = write_folder(tmp_path / "run", world=2, nodes=2, state="failed",
                       faults=[{"fault": "kill-node:1@2", "kind": "kill-node", "target": 1, "phase": "begin",
                                "did": "SIGKILL to node 1", "lab_s": 7.5, "fired_s": 2.0}],
                       node_outcomes=[{"index": 0, "hostname": "lab-0", "exit_code": None, "state": "stopped",
                                       "exited_s": 9.0, "reason": "after node 1 failed"},
                                      {"index": 1, "hostname": "lab-1", "exit_code": None, "state": "killed",
                                       "exited_s": 7.6, "signal": "SIGKILL"}])
    text = report.fault_timeline(RunDir.open(run).record)
    assert "every node was running at 5.5 s" in text
    rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert rows == ["| 7.5 | fault kill-node:1@2 | SIGKILL to node 1 |",
                    "| 7.6 | node 1 ended | killed by SIGKILL |",
                    "| 9.0 | node 0 ended | stopped (after node 1 failed) |"]


def test_json_and_csv_say_the_same_records(tmp_path):
    run = RunDir.open(write_folder(tmp_path / "run", world=2, nodes=1, results=RESULTS))
    data = json.loads(report.render(run, "json"))
    assert data["status"]["state"] == "passed" and [w["workload"] for w in data["workloads"]] == \
        ["env", "p2p", "no-such-workload"]
    assert [(r["name"], r["rank"]) for r in data["failed_checks"]] == [("ping-pong", 1), ("workload_done", 1)]
    rows = report.render(run, "csv").splitlines()
    assert rows[0] == "workload,name,rank,ok,skipped,detail,reason" and len(rows) == 1 + len(RESULTS)
    assert "p2p,ping-pong,1,False,,\"got [1.0], expected [2.0]\"," in rows


def test_a_run_with_nothing_to_compare_or_predict_says_so_in_one_line(tmp_path):
    import pytest

    from labctl.errors import LabError, Refused

    run = RunDir.open(write_folder(tmp_path / "run", world=2, nodes=1, results=RESULTS))
    with pytest.raises(Refused, match="nothing to compare: none of its workloads"):     # bad input: exit 2
        report.compare(run, run)
    with pytest.raises(LabError, match="nothing to predict from"):
        report.predict(run, 8)


def test_the_stacks_table_says_where_each_rank_was_and_whether_it_had_exited(tmp_path):
    run = RunDir.open(write_folder(tmp_path / "run", world=2, nodes=1))
    text = report.stacks_table({"1": {"file": "/t/a.py", "line": 3, "function": "f", "call": "barrier"},
                                "0": {}}, run, {"0": -9})
    lines = text.splitlines()
    assert lines[2] == f"| 0 | exited -9 | (no frame in user code) |  | {run.path}/stacks/rank-0.txt |"
    assert lines[3] == f"| 1 | running when asked | /t/a.py:3 in f | barrier | {run.path}/stacks/rank-1.txt |"


def test_a_run_that_passed_shows_no_stacks_the_live_watcher_took_at_a_slow_start(tmp_path):
    run = RunDir.open(write_folder(tmp_path / "run", world=2, nodes=1))
    run.record.stacks = {0: {"file": "/t/a.py", "line": 3, "function": "f", "call": None}}
    assert run.record.ok and "Where each rank was" not in report.markdown(run)


def test_a_page_that_is_a_folder_is_named_as_the_page_not_its_tmp(tmp_path):
    """Issue 38: `labctl report RUN --format html` with report.html a folder said
    `'.../report.html.tmp': Is a directory`."""
    run = write_folder(tmp_path / "run", world=2, nodes=1)
    (run / "report.html").mkdir()
    done = labctl("report", str(run), "--format", "html", timeout=120)
    assert done.returncode == 1 and done.stderr == f"error: '{run}/report.html': Is a directory\n", done.stderr
    assert not list(run.glob("*.tmp"))
