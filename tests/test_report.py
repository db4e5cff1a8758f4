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
