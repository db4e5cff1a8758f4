"""labctl/report.py: report.md, the JSON and CSV reports, from run folders made by hand
(tests/html_support.py: write_folder), and `labctl report` on damaged folders."""
from __future__ import annotations

import json
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
