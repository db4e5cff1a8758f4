"""Nothing a script prints can sink the lab (issue 52 item 2): a real lab whose rank prints
1,000 hostile `@@labctl-result` lines (huge, negative, NaN, infinite, nested, wrongly typed
values in every field labctl computes with) beside an honest bench sweep. Three such lines
once took `labctl up` to 23 GB writing the report; `report`, the page and `predict` hung.
"""
from __future__ import annotations

import json
import subprocess

import pytest

from conftest import LABCTL, REPO, labctl
from hostile_results import honest_sweep, hostile_lines, peak_rss, script

LINES = 1000
RSS_LIMIT_MIB = 200


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """One real lab for every assertion: 1 node x 2, rank 0 prints the honest sweep and
    LINES hostile lines."""
    folder = tmp_path_factory.mktemp("hostile")
    path = folder / "hostile.py"
    path.write_text(script(LINES))
    out = folder / "run"
    code, peak, stdout, stderr = peak_rss([*LABCTL, "up", "--script", str(path), "--nodes", "1",
                                           "--nproc-per-node", "2", "--launcher", "direct",
                                           "--out", str(out)], folder, cwd=REPO)
    return out, code, peak, stdout, stderr


def test_labctl_up_ends_as_the_script_did_in_flat_memory_naming_every_hostile_line(lab):
    out, code, peak, stdout, stderr = lab
    assert code == 0, stderr[-2000:]
    assert peak < RSS_LIMIT_MIB, f"labctl's peak RSS was {peak:.0f} MiB"
    status = json.loads((out / "status.json").read_text())
    assert status["state"] == "passed"
    # every hostile line counted, the first ten named with the field and why; no line of noise each
    ignored = status["ignored_results"]
    assert ignored["count"] == LINES and len(ignored["first"]) == 10
    assert all(" should be " in text and text.startswith("rank 0's record ") for text in ignored["first"])
    assert stderr.count("\n") < 20 and stdout.count("should be") <= 2
    note = f"results: {LINES:,} result line(s) ignored"
    assert any(n.startswith(note) for n in status["notes"])
    assert note in (out / "report.md").read_text()
    # the honest records are kept, and only they: results.jsonl and the checks
    kept = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(kept) == len(honest_sweep()) and status["checks"]["total"] == len(honest_sweep())
    # the page names them too (its notes), and is made whole
    assert note in (out / "report.html").read_text()


def test_the_commands_on_the_folder_answer_from_the_honest_rows(lab):
    out = lab[0]
    for args in (["report", str(out)], ["report", str(out), "--format", "json"],
                 ["report", str(out), "--format", "html"], ["compare", str(out), str(out)],
                 ["predict", str(out), "-n", "4"]):
        done = labctl(*args, timeout=120)
        assert done.returncode == 0, (args, done.stderr)
        assert "Traceback" not in done.stderr and "warning" not in done.stderr, (args, done.stderr)
    predicted = json.loads(labctl("predict", str(out), "-n", "4", "--format", "json").stdout)
    assert {r["op"] for r in predicted["rows"]} == {"pingpong", "all_reduce"}
    assert all(0 < r["time_us"] < 1e7 for r in predicted["rows"])


def test_hostile_lines_written_into_results_jsonl_by_hand_are_a_few_warnings_and_a_count(lab, tmp_path):
    out = tmp_path / "edited"
    subprocess.run(["cp", "-r", str(lab[0]), str(out)], check=True)
    with open(out / "results.jsonl", "a") as f:
        f.writelines(f'{line[:-1]}, "rank": 0}}\n' for line in hostile_lines(LINES))
    done = labctl("report", str(out), timeout=120)
    assert done.returncode == 0 and "Traceback" not in done.stderr
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 6, warnings
    assert warnings[-1].endswith(f"... and {LINES - 5:,} more result lines skipped (garbled, or a field of "
                                 "the wrong type or outside the lab's bounds: docs/limits.md)")


STATUS_EDITS = [   # (key, value, what `labctl report` says: one line naming it, exit 2; None: the report, without it)
    ("state", None, "unknown state 'None'"),
    ("rank_exit_codes", {"1": "killed"}, "'rank_exit_codes' should hold exit codes"),
    ("rank_errors", {"0": None}, "an error record without its exception"),
    ("trace", {"file": "trace.json", "ops": 3, "missing_ranks": 1e9}, "'trace' should be an object"),
    ("trace", {"file": 5, "ops": 3}, "'trace' should be an object"),
    ("stacks", {"0": 7}, "'stacks' should hold an object per rank"),
    ("live", {"made_at": "soon", "since": 1.0, "reason": "r", "text": "t"}, None),
]


@pytest.mark.parametrize("key,value,said", STATUS_EDITS, ids=[f"{k}={v!r}"[:40] for k, v, _ in STATUS_EDITS])
def test_a_status_json_edited_out_of_its_types_is_one_line_or_a_report_without_that_part(lab, tmp_path, key, value,
                                                                                        said):
    """Numbers read from status.json are bounded where it is read (labctl/runrecord.py): these
    were tracebacks in report.md, the JSON report or the page."""
    out = tmp_path / "edited"
    subprocess.run(["cp", "-r", str(lab[0]), str(out)], check=True)
    status = json.loads((out / "status.json").read_text())
    status[key] = value
    (out / "status.json").write_text(json.dumps(status))
    for fmt in ("md", "json", "html"):
        done = labctl("report", str(out), "--format", fmt, timeout=120)
        assert "Traceback" not in done.stderr, (fmt, done.stderr)
        if said is None:
            assert done.returncode == 0, (fmt, done.stderr)
        elif fmt == "html":                 # the page is made whatever is damaged, the damage named on it
            assert done.returncode == 0 and said in done.stderr, done.stderr
            assert said in (out / "report.html").read_text()
        else:
            assert done.returncode == 2 and said in done.stderr and done.stderr.count("\n") == 1, (fmt, done.stderr)


def _tp_step(rank: int, **edits) -> dict:
    """A tp rank's last step as workloads/_patterns.py records it (a 4-rank manual run)."""
    record = {"workload": "tp", "name": "manual-bytes-per-step", "ok": True, "rank": rank, "ranks": 4,
              "activation_bytes": 1024, "blocks": 2, "formula": 4608.0, "sent": 4608.0, "unit": "bytes",
              "formula_text": "(2L-1) 2(n-1)/n A = 3 x 2 x 3/4 x 1024 B", "groups": {"default_pg": [0, 1, 2, 3]},
              "ops": [["all_reduce", "default_pg", 4, 1024, None]] * 3}
    return {**record, **edits}


@pytest.mark.parametrize("edit,said", [
    ({"ranks": 65536}, "its pattern records say 65,536 ranks in a run of 4 (status.json)"),
    ({"ops": [["all_reduce", "default_pg", 4, 1 << 40, None]] * 3}, None),
], ids=["a world of 65,536", "an op of 1 TiB"])
def test_predict_on_an_edited_pattern_run_refuses_or_answers_without_replaying_millions(tmp_path, edit, said):
    """A pattern run's `labctl predict` (workloads/_report/_patterncost.py) read `ranks` and
    each op's size from the results: 65,536 ranks in a 4-rank run looped over 65,536^2 node
    pairs (over 120 s); a 1 TiB op (the lab's bound) replayed a million segments (over 60 s)."""
    import time

    run = tmp_path / "run"
    run.mkdir()
    (run / "status.json").write_text(json.dumps({"run_id": "r", "lab": "lab", "state": "passed",
                                                 "backend": "local", "world_size": 4}))
    (run / "results.jsonl").write_text("".join(json.dumps(_tp_step(r, **edit)) + "\n" for r in range(4)))
    started = time.monotonic()
    done = labctl("predict", str(run), "-n", "8", "--link", "1gbit", "--format", "json", timeout=120)
    assert time.monotonic() - started < 30
    if said:
        assert done.returncode == 2 and said in done.stderr and done.stderr.count("\n") == 1, done.stderr
    else:
        assert done.returncode == 0, done.stderr
        (row,) = json.loads(done.stdout)["rows"]
        assert row["model"] == "closed form (more than 50,000 messages to replay)"
        # the ring's closed form: 3 all_reduces of 2 (n-1)/n x 1 TiB at 1 Gbit/s
        assert row["beta_term_us"] == pytest.approx(3 * 2 * 7 / 8 * (1 << 40) / 125e6 * 1e6, rel=1e-3)
