"""labctl/lab.py: the run folder's finish is protected as the log collection is.

A first SIGINT/SIGTERM/SIGHUP while labctl finishes the run folder (splitting the logs,
merging the trace, writing the report) is noted and the folder is finished; a second one
cuts the finish short and status.json says so truthfully (state interrupted, what is
missing), with no temporary file left. Real signals, delivered to this process at each
step (the steps are wrapped to send them); the same for real labs in
tests/test_backend_local.py and tests/test_e2e_compose_nothing_lost.py.
"""
from __future__ import annotations

import json
import os
import signal

import pytest

from labctl import blame, lab, report, rundir, trace
from labctl.backends.base import RunView
from labctl.errors import Interrupted
from labctl.outcome import RunState
from labctl.spec import from_dict
from test_driver import ScriptedBackend

STEPS = {          # a step of the finish -> (object, attribute) wrapped to signal inside it
    "splitting the node logs into ranks/ and results.jsonl": (blame.LogReading, "finish"),
    "merging the trace": (trace, "merge"),
    "writing the report": (report, "markdown"),
}


def _signalling(monkeypatch, step: str, signals: int, signum=signal.SIGINT) -> None:
    owner, name = STEPS[step]
    real = getattr(owner, name)

    def wrapped(*args, **kwargs):
        for _ in range(signals):
            os.kill(os.getpid(), signum)        # the handler runs right here
        return real(*args, **kwargs)
    monkeypatch.setattr(owner, name, wrapped)


def _up(tmp_path, lines):
    script = tmp_path / "train.py"          # a script: the lab passes on the nodes' word alone
    script.write_text("pass\n")
    spec = from_dict({"nodes": 2, "nproc_per_node": 1, "trace": True, "timeout": 60,
                      "script": str(script)})
    backend = ScriptedBackend(script={i: ["running", "succeeded"] for i in range(2)})
    return lab.up(spec, out=str(tmp_path / "run"), progress=lines.append, backend=backend)


def _leftovers(path) -> list[str]:
    return sorted(p.name for p in path.rglob("*") if p.name.endswith(".tmp")
                  or p.name == rundir.RESERVE_NAME)


@pytest.mark.parametrize("step", list(STEPS))
def test_one_signal_while_the_folder_is_finished_lets_it_finish(tmp_path, monkeypatch, step):
    before = signal.getsignal(signal.SIGINT)    # default_int_handler; SIG_IGN under `nohup ... &`
    _signalling(monkeypatch, step, 1)
    lines: list[str] = []
    run = _up(tmp_path, lines)
    status = json.loads((run.path / "status.json").read_text())
    assert any("SIGINT: finishing the run folder first; send it again to cut it short" in line
               for line in lines), lines
    # the lab's own outcome, and the whole folder
    assert status["state"] == "passed" and "signal" not in status
    assert "SIGINT arrived while the run folder was being finished; it was finished first, " \
           "and the outcome is the lab's own" in status["notes"]
    assert (run.path / "report.md").is_file() and (run.path / "trace.json").is_file()
    assert _leftovers(run.path) == []
    # the signal regime ends with the run: the handler from before it is back
    assert signal.getsignal(signal.SIGINT) is before


@pytest.mark.parametrize("step", list(STEPS))
def test_a_second_signal_cuts_the_finish_short_and_says_what_is_missing(tmp_path, monkeypatch, step):
    _signalling(monkeypatch, step, 2, signal.SIGTERM)
    lines: list[str] = []
    run = _up(tmp_path, lines)
    status = json.loads((run.path / "status.json").read_text())
    assert status["state"] == "interrupted" and status["signal"] == "SIGTERM" and not status["ok"]
    assert status["message"].startswith(f"SIGTERM cut the run folder's finish short while {step}: ")
    assert [n["state"] for n in status["node_outcomes"]] == ["succeeded", "succeeded"]
    missing = status["unfinished"]
    assert missing[-1].startswith("no report.md (`labctl report ") and not (run.path / "report.md").exists()
    if step != "writing the report":       # the page comes before report.md
        assert missing[-1].endswith("no report.html (`labctl report "
                                    f"{run.path} --format html` writes it)")
    if step == "writing the report":
        assert len(missing) == 1 and (run.path / "trace.json").is_file()
        assert (run.path / "report.html").is_file(), "written whole before the cut"
        assert status["message"].endswith("the lab itself had passed")
    else:
        assert any(m.startswith("no trace.json") for m in missing)
        assert not (run.path / "trace.json").exists()
    if step.startswith("splitting"):
        assert missing[0].startswith("ranks/ and results.jsonl are incomplete")
    assert _leftovers(run.path) == [], "no .tmp and no reserve: every writer is atomic"
    assert any(line.startswith(f"SIGTERM: {step} cut short") for line in lines), lines


def test_a_signal_after_the_cut_is_only_noted_and_the_record_stands(tmp_path, monkeypatch):
    """A third signal while the cut-short record is written changes nothing."""
    _signalling(monkeypatch, "merging the trace", 3)
    run = _up(tmp_path, [])
    status = json.loads((run.path / "status.json").read_text())
    assert status["state"] == "interrupted" and _leftovers(run.path) == []


def test_a_signal_cutting_labctl_downs_finish_short_deletes_nothing(tmp_path, monkeypatch):
    """`labctl down` of an abandoned run finishes its folder under the same protection;
    cut short, it deletes nothing (`labctl down` again cleans up)."""
    run = _up(tmp_path, [])
    run.record.state = RunState.RUNNING
    run.record.controller = None              # its labctl is gone (here: never known)
    run.save()

    class Alive(ScriptedBackend):
        def attach(self, target):
            self.plan = lab.make_plan(target.spec, run_id=target.record.run_id, backend=self)

        def describe(self, within=0.0, joins=False):
            return RunView(self.poll, lambda: True)

    backend = Alive(script={i: ["succeeded"] for i in range(2)})
    monkeypatch.setattr(lab.backends, "create", lambda *a, **k: backend)
    _signalling(monkeypatch, "writing the report", 2)
    with pytest.raises(lab.DownInterrupted) as err:          # one line: what was done, what is left
        lab.down(run, progress=lambda line: None)
    assert str(err.value) == (f"interrupted (SIGINT) while finishing the run folder: the logs were saved into "
                              f"{run.path}; nothing was deleted; left: the lab, not deleted; the run folder's "
                              f"status.json and report, unfinished; `labctl down {run.path}` again finishes it")
    assert err.value.exit_code == 130 and "delete" not in backend.calls
    status = json.loads((run.path / "status.json").read_text())
    assert status["state"] == "interrupted" and status["unfinished"]
    assert RunState(status["state"]) is RunState.INTERRUPTED and _leftovers(run.path) == []
