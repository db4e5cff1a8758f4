"""labctl/html/data.py, `page_data(run folder)`: the page's one reader of the run folder,
on folders made by hand (tests/html_support.py). No browser: what the JSON island holds."""
from __future__ import annotations

import json
from pathlib import Path

from html_support import write_folder
from labctl import html, report
from labctl.rundir import RunDir
from labctl.limits import MAX_FILE_BYTES
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
           "numbers or null, found 5" in said[0], said
    assert "'before' should be what a rank held" in said[1] and "'peer' should be a rank number" in said[2]
    assert "'local_loss' should be" in said[3] and "'seconds' should be a number of seconds" in said[4]
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


# ---------------------------------------------------------------- each section's reading

TRACEBACK = ["Traceback (most recent call last):", '  File "/t/train.py", line 9, in <module>',
             "    step()", "    ~~~~^^", "ValueError: lr -0.1"]


def test_the_quote_is_the_last_traceback_from_header_to_exception(tmp_path):
    from labctl.html import data as datamod

    log = tmp_path / "rank-1.log"
    log.write_text("\n".join(["[rank1]: " + x for x in ["Traceback (most recent call last):", "old: 1", *TRACEBACK,
                                                        "after the exception"]]) + "\n")
    assert datamod.last_traceback(log) == TRACEBACK
    long = ["Traceback (most recent call last):", *[f'  File "/t/a.py", line {i}, in f' for i in range(100)],
            "RuntimeError: deep"]
    log.write_text("\n".join(long) + "\n")
    quote = datamod.last_traceback(log)
    assert len(quote) == datamod.MAX_QUOTE_LINES and quote[0] == long[0] and quote[-1] == "RuntimeError: deep"
    assert quote[1] == f"  ... ({len(long) - datamod.MAX_QUOTE_LINES} lines left out)"
    log.write_text("no traceback here\n")
    assert datamod.last_traceback(log) is None


def test_the_failure_box_quotes_the_failing_rank_s_log_and_a_passed_run_has_none(tmp_path):
    run = write_folder(tmp_path / "run", world=2, nodes=1, state="failed", message="rank 1 ...",
                       first_failure={"rank": 1, "node": 0, "exit_code": 1,
                                      "error": {"exception": "ValueError: lr -0.1", "file": str(tmp_path / "t.py"),
                                                "line": 2}})
    (tmp_path / "t.py").write_text("import x\nraise ValueError('lr -0.1')\n")
    (run / "ranks" / "rank-1.log").write_text("\n".join(TRACEBACK) + "\n")
    failure = html.page_data(run)["failure"]
    assert failure["text"] == f"rank 1 on node 0 exited with code 1: ValueError: lr -0.1 at {tmp_path / 't.py'}:2"
    assert failure["quote"] == TRACEBACK and failure["quote_rank"] == 1
    assert failure["code"] == "raise ValueError('lr -0.1')"
    assert html.page_data(write_folder(tmp_path / "ok", world=2, nodes=1))["failure"] is None
    timeout = write_folder(tmp_path / "timeout", world=2, nodes=1, state="timeout", message="")
    assert html.page_data(timeout)["failure"] == {"text": "the run ended timeout", "rank": None, "quote": None}


def test_missing_rank_logs_are_named_twenty_at_most_and_the_list_is_cut(tmp_path):
    run = write_folder(tmp_path / "run", world=300, nodes=1, state="failed")
    for r in range(1, 300):
        (run / "ranks" / f"rank-{r}.log").unlink()
    data = html.page_data(run)
    (said,) = [p for p in data["problems"] if p.startswith("rank logs missing")]
    assert said.startswith("rank logs missing: ranks/rank-1.log, ranks/rank-2.log") and said.endswith(" and 279 more")
    assert len(data["logs"]["ranks"]) == 256 and data["logs"]["ranks"][0]["bytes"] == 0
    assert data["logs"]["ranks"][1]["bytes"] is None


def test_the_facts_say_the_state_as_seen_now_and_the_script_with_its_arguments(tmp_path):
    run = write_folder(tmp_path / "run", world=2, nodes=1, state="running",
                       controller={"pid": 2 ** 22 + 12345, "host": __import__("socket").gethostname(),
                                   "start_ticks": 1})
    (run / "spec.yaml").write_text("name: lab\nscript: /t/train.py\nscript_args: [--lr, 3]\ntrace: true\n")
    facts = html.page_data(run)["run"]
    assert facts["state"] == "abandoned" and facts["recorded_state"] == "running"
    assert facts["script"] == {"path": "/t/train.py", "args": ["--lr", "3"]} and facts["trace"] is True
    assert facts["init_method"] == "env://" and facts["replicas"] == 1


def test_a_hang_s_stacks_put_the_main_thread_first_and_are_cut_past_the_bound(tmp_path):
    from labctl.html import data as datamod

    run = write_folder(tmp_path / "run", world=2, nodes=1, state="timeout", checks={"total": 0},
                       stacks={"0": {"file": "/t/a.py", "line": 3, "function": "f", "call": "barrier"}})
    (run / "stacks").mkdir()
    (run / "stacks" / "rank-0.txt").write_text("Thread 0x1 (most recent call first):\n  File \"x\", line 1 in w\n\n"
                                               "Current thread 0x2 (most recent call first):\n  File \"/t/a.py\", line 3 in f\n")
    (run / "stacks" / "rank-1.txt").write_text("Current thread 0x3:\n" + "  x\n" * datamod.MAX_STACK_CHARS)
    hang = html.page_data(run)["hang"]
    assert [s["rank"] for s in hang["stacks"]] == [0, 1] and hang["collective"] is None
    zero, one = hang["stacks"]
    assert [t["name"] for t in zero["threads"]] == ["Current thread 0x2 (most recent call first)",
                                                    "Thread 0x1 (most recent call first)"]
    assert zero["where"]["call"] == "barrier" and not zero["cut"] and one["cut"]
    assert html.page_data(write_folder(tmp_path / "ok", world=2, nodes=1))["hang"] is None


def test_a_missing_results_file_and_a_missing_trace_of_a_traced_lab_are_named(tmp_path):
    run = write_folder(tmp_path / "run", world=2, nodes=1, trace=True)
    (run / "results.jsonl").unlink()
    problems = html.page_data(run)["problems"]
    assert "results.jsonl is missing: no checks or data to show" in problems
    assert "trace.json is missing: the lab was traced but no timeline was written" in problems


def test_a_spec_yaml_past_a_lab_file_s_bound_is_named_not_read(tmp_path):
    """spec.yaml is read no further than a lab file may be (it was read whole)."""
    run = write_folder(tmp_path / "run", world=2, nodes=1)
    (run / "spec.yaml").write_bytes(b"name: lab\n" + b"# padding\n" * (MAX_FILE_BYTES // 10 + 1))
    data = html.page_data(run)
    said = [p for p in data["problems"] if p.startswith("spec.yaml")]
    assert said and "larger than 1 MiB" in said[0], data["problems"]


def test_a_links_run_s_page_has_the_pair_matrix_the_topology_and_the_slow_node(tmp_path):
    """Issue 38: a links run's pair matrix and slow node were in report.md only."""
    from test_links_workload import records

    run = write_folder(tmp_path / "run", world=3, nodes=3, results=records())
    (section,) = html.page_data(run)["workloads"]
    assert section["workload"] == "links"
    views = {v["id"]: v for v in section["views"]}
    assert list(views) == ["links-topology", "links-matrix", "links-directions", "links-verdict"]
    assert views["links-topology"]["rows"] == [[0, "lab-0", "unshaped"], [1, "lab-1", "unshaped"],
                                               [2, "lab-2", "100 Mbit/s"]]
    matrix = views["links-matrix"]
    assert matrix["kind"] == "matrix" and matrix["labels"] == ["node 0", "node 1", "node 2"]
    assert matrix["texts"][0] == ["—", "20,000", "95"] and matrix["cells"][0][0] is None
    assert sorted(map(tuple, matrix["marked"])) == [(0, 2), (1, 2), (2, 0), (2, 1)]     # the slow pairs
    assert "Node 2 is slow: every pair it is in is slow (its link is configured at 100 Mbit/s)" \
        in views["links-verdict"]["text"] and "**" not in views["links-verdict"]["text"]


# ---------------------------------------------------------------- trace.json, damaged

def _traced(tmp_path: Path) -> tuple[Path, bytes]:
    from html_support import synthetic_trace

    run = write_folder(tmp_path / "run", world=4, nodes=2, trace=True)
    synthetic_trace(run / "trace.json", 50, world=4, nodes=2)
    return run, (run / "trace.json").read_bytes()


def test_a_trace_cut_after_its_events_or_in_its_end_is_said_to_be_cut(tmp_path):
    """Issue 38: a trace.json cut after its last event (its metadata lost: the missing ranks,
    the clocks) drew with no word on the page."""
    run, whole = _traced(tmp_path)
    assert [p for p in html.page_data(run)["problems"] if "trace" in p] == []
    lines = whole.split(b"\n")
    end = lines.index(b"],")
    for cut in (b"\n".join(lines[:end + 1]) + b"\n",          # after `],`
                whole[:-20],                                    # in the metadata line
                whole[:-2]):                                    # without the file's last brace
        (run / "trace.json").write_bytes(cut)
        data = html.page_data(run)
        said = [p for p in data["problems"] if "trace" in p]
        assert len(said) == 1 and said[0].startswith("trace.json is cut short at line ") \
            and "after its events" in said[0], said
        assert data["timeline"]["total"] == 50                  # every event is still drawn
    array = b"\n".join([b"[", *lines[1:end], b"]"]) + b"\n"   # the array form: `]` ends it
    (run / "trace.json").write_bytes(array)
    assert [p for p in html.page_data(run)["problems"] if "trace" in p] == []
    (run / "trace.json").write_bytes(array[:-2])
    assert any("cut short" in p for p in html.page_data(run)["problems"])


def test_an_event_at_an_absurd_or_non_finite_time_is_skipped_and_named(tmp_path):
    """Issue 38: `ts: 1e308` made the page's timeline NaN (its range 1e308 µs)."""
    run, whole = _traced(tmp_path)
    lines = whole.split(b"\n")
    bad = []
    for value in (b"1e308", b"NaN", b"-Infinity"):
        i = next(k for k, line in enumerate(lines) if line.startswith(b'{"ph":"X"') and k not in bad)
        lines[i] = lines[i].replace(b'"ts":', b'"ts":' + value + b',"was":', 1)
        bad.append(i)
    i = next(k for k, line in enumerate(lines) if line.startswith(b'{"ph":"X"') and k not in bad)
    lines[i] = lines[i].replace(b'"dur":', b'"dur":1e300,"was":', 1)
    (run / "trace.json").write_bytes(b"\n".join(lines))
    data = html.page_data(run)
    (said,) = [p for p in data["problems"] if "trace" in p]
    assert said.startswith("trace.json: 4 event(s) with a time that is not finite or past 1e+17 µs skipped") \
        and "ts 1e+308" in said, said
    timeline = data["timeline"]
    assert timeline["total"] == 46 and timeline["end_us"] < 1e6
    assert all(abs(t) < 1e6 for t in timeline["slices"]["ts"])


def _rank_records(rank: int, starts: list[int], late: int = 0) -> str:
    """One rank's records: an all_reduce per start (ms), rank `late` ms late at the 2nd."""
    lines = [{"k": "H", "v": 2, "t0": 1_000_000_000, "pid": rank},
             {"k": "G", "pg": "default_pg", "ranks": [0, 1]},
             {"k": "S", "s": 1, "op": "all_reduce", "pg": "default_pg", "kind": "c", "bytes": 4,
              "dtype": "float32", "shape": [1], "caller": "job.py:5"}]
    out = "".join("@@labctl-trace " + json.dumps(x) + "\n" for x in lines)
    for i, ms in enumerate(starts, 1):
        begin = (ms + (late if i == 2 else 0)) * 1_000_000
        out += f"@@labctl-trace B {i} 1 {i} {begin}\n@@labctl-trace E {i} {begin + 3_000_000 * rank + 1_000_000}\n"
    return out


def test_the_page_takes_the_merge_s_totals_and_stragglers_and_points_at_their_slices(tmp_path):
    """The merge writes its per-op totals and worst stragglers into trace.json; the page
    shows those (the numbers `labctl trace` prints), not a count of its own, and points
    each row at its slices. A trace.json without them (another writer's) is still counted."""
    from labctl import trace
    from labctl.html import timeline

    run = tmp_path / "run"
    (run / "ranks").mkdir(parents=True)
    (run / "ranks" / "rank-0.log").write_text(_rank_records(0, [10, 20, 30]))
    (run / "ranks" / "rank-1.log").write_text(_rank_records(1, [10, 20, 30], late=7))
    summary = trace.merge(run, world=2)
    page = timeline.read(run / "trace.json")
    totals = timeline.totals(page)
    assert [(t["pg"], t["op"], t["count"], t["total_ms"], t["slowest_ms"], t["slowest_rank"]) for t in totals] == \
        [("default_pg", "all_reduce", 6, round(sum(t.total_ns for t in summary.totals.values()) / 1e6, 3), 4.0, 1)]
    slowest = totals[0]["slowest_slice"]
    assert page.cols["dur"][slowest] == 4000.0 and page.lanes[page.cols["lane"][slowest]].rank == 1
    found = timeline.stragglers(page)
    assert [(s["seq"], s["rank"], s["late_ms"]) for s in found] == \
        [(x.seq, x.rank, round(x.late_ns / 1e6, 3)) for x in summary.stragglers]
    assert found[0]["seq"] == 2 and found[0]["rank"] == 1 and found[0]["late_ms"] == 7.0
    assert len(found[0]["slices"]) == 2
    data = json.loads((run / "trace.json").read_text())
    data["metadata"]["totals"][0]["count"] = 999                     # the page shows the merge's numbers
    del data["metadata"]["stragglers"]                               # and counts what is not there
    (run / "trace.json").write_text(json.dumps(data))
    page = timeline.read(run / "trace.json")
    assert timeline.totals(page)[0]["count"] == 999
    assert [(s["seq"], s["rank"]) for s in timeline.stragglers(page)][0] == (2, 1)


def test_the_lab_s_own_frames_fold_into_one_line_and_the_user_s_stay():
    """Issue 53 item 9: the lab's runner, recorder and the runpy frames between them filled
    a user's traceback and stack on the page; a run of them is now one line. A runpy frame
    with no lab frame beside it is the user's own (their code called runpy) and stays."""
    from labctl.html.data import fold_lab_frames

    traceback = ["Traceback (most recent call last):",
                 '  File "<frozen runpy>", line 198, in _run_module_as_main',
                 '  File "/opt/venv/lib/python3.11/site-packages/workloads/_script.py", line 155, in <module>',
                 "    recorded(main)()", "    ^^^^^^^^^^^^^^^^",
                 '  File "/work/workloads/_record.py", line 44, in wrapper', "    return fn(*args, **kwargs)",
                 '  File "<frozen runpy>", line 291, in run_path',
                 '  File "/me/train.py", line 9, in <module>', "    step()",
                 '  File "/usr/lib/python3.11/runpy.py", line 88, in _run_code', "    exec(code)",
                 '  File "/me/step.py", line 2, in step', "    raise ValueError('x')",
                 "ValueError: x"]
    assert fold_lab_frames(traceback) == [
        "Traceback (most recent call last):", "  … 4 lab frames",
        '  File "/me/train.py", line 9, in <module>', "    step()",
        '  File "/usr/lib/python3.11/runpy.py", line 88, in _run_code', "    exec(code)",
        '  File "/me/step.py", line 2, in step', "    raise ValueError('x')", "ValueError: x"]
    dump = ["Current thread 0x00007f7e (most recent call first):",
            '  File "/work/workloads/_trace/works.py", line 89 in wait',
            '  File "/venv/torch/distributed/distributed_c10d.py", line 3252 in all_reduce',
            '  File "/me/hang.py", line 20 in <module>',
            '  File "<frozen runpy>", line 88 in _run_code', '  File "/work/workloads/_script.py", line 147 in main']
    assert fold_lab_frames(dump) == [dump[0], "  … 1 lab frame", dump[2], dump[3], "  … 2 lab frames"]
