"""One lifecycle contract, every backend: local (real processes), compose (real
containers) and k8s (the in-memory API fakes of test_backend_k8s).

pass · a failing rank (named first, the others stopped within the grace) ·
the deadline · an interrupt — each ends with every node's log in the run
folder, a finished status.json, and nothing of the run left anywhere.
"""
from __future__ import annotations

import dataclasses
import time

import pytest

from labctl import backends, driver, finish, lab
from labctl.rundir import RunDir
from labctl.spec import from_dict

from conftest import assert_nothing_left
from docker_support import require_compose, require_image

# rank 1 fails with exit 3 after everyone joined; the others would wait forever
FAIL_RANK_1 = """
import os, sys, time, torch.distributed as dist
dist.init_process_group("gloo")
print("joined", flush=True)
if dist.get_rank() == 1:
    time.sleep(1)
    sys.exit(3)
time.sleep(600)
"""
HANG = """
import time, torch.distributed as dist
dist.init_process_group("gloo")
print("hanging", flush=True)
time.sleep(600)
"""
PASS = """
import torch.distributed as dist
dist.init_process_group("gloo")
dist.barrier()
print("done", flush=True)
"""
SCENARIOS = {
    # name: (script, extra spec fields, k8s fake exit codes, expected state)
    "pass": (PASS, {}, {0: 0, 1: 0}, "passed"),
    "failing-rank": (FAIL_RANK_1, {}, {0: None, 1: 3}, "failed"),
    "deadline": (HANG, {"timeout": 10}, {0: None, 1: None}, "timeout"),
    "interrupt": (HANG, {}, {0: None, 1: None}, "interrupted"),
}
GRACE = 3.0


class Interrupter:
    """Progress sink that presses Ctrl-C once every node has been seen running and has
    printed "hanging" (`printed(lines)`: the event, asked until it is true; a backend
    whose fake nodes print nothing says True at once), never after a fixed wait."""

    def __init__(self, armed: bool, printed=lambda lines: True):
        self.armed, self.lines, self.printed = armed, [], printed

    def __call__(self, line: str) -> None:
        self.lines.append(line)
        if self.armed and line.startswith("[") and line.count("running") == 2:
            self.armed = False
            waited = time.monotonic() + 120     # a loaded machine imports torch slowly
            while not self.printed(self.lines):
                if time.monotonic() > waited:
                    pytest.fail("the nodes never printed 'hanging' in 120 s: " + " | ".join(self.lines[-5:]))
                time.sleep(0.2)
            raise KeyboardInterrupt


def _live_logs_say(logs, word: str):
    """Every node's live log (local backends write them as the ranks print) holds `word`."""
    return lambda lines: all(p.is_file() and word in p.read_text() for p in logs)


def _containers_say(word: str):
    """Every container of the run (its id from the progress line `run <id>: ...`) printed
    `word` (docker logs): compose's node logs are collected only at the end."""
    import subprocess

    from labctl.rendered import RUN_LABEL

    def said(lines) -> bool:
        run_id = next((x.split()[1].rstrip(":") for x in lines if x.startswith("run ")), None)
        ids = subprocess.run(["docker", "ps", "-a", "-q", "--filter", f"label={RUN_LABEL}={run_id}"],
                             capture_output=True, text=True).stdout.split()
        logs = [subprocess.run(["docker", "logs", c], capture_output=True, text=True) for c in ids]
        return len(ids) == 2 and all(word in done.stdout + done.stderr for done in logs)
    return said


def _run_local(tmp_path, spec, progress):
    return lab.up(spec, out=str(tmp_path / "run"), progress=progress)


def _run_compose(tmp_path, spec, progress):
    require_compose()
    require_image()
    return lab.up(spec, out=str(tmp_path / "run"), progress=progress)


def _run_k8s(tmp_path, spec, progress, exit_codes):
    import test_backend_k8s as fakes
    from labctl.backends.k8s import backend as k8s

    state = fakes.FakeState(exit_codes=exit_codes)
    backend = k8s.K8sBackend(progress, cluster=fakes.fake_cluster(state))
    if spec.timeout == 10:                  # the fakes advance per poll: a short deadline
        spec = dataclasses.replace(spec, timeout=0.3)
    the_plan = lab.make_plan(spec, backend=backend)
    run = RunDir.create(the_plan, out=tmp_path / "run")
    k8s_poll = k8s.POLL_S
    k8s.POLL_S = 0.01
    try:
        result = driver.run(the_plan, backend, run, progress, grace=GRACE)
    finally:
        k8s.POLL_S = k8s_poll
    finish.finish(run, result.seen, progress)
    assert all(not objs for objs in state.objects.values()), "objects of the run left behind"
    return run


@pytest.mark.slow
@pytest.mark.parametrize("scenario", list(SCENARIOS))
@pytest.mark.parametrize("backend", ["local", pytest.param("compose", marks=pytest.mark.docker), "k8s",
                                     "subprocess"])
def test_lifecycle(tmp_path, monkeypatch, backend, scenario):
    # a backend = one module + one registry line: tests/subprocess_backend.py, registered here
    monkeypatch.setitem(backends.REGISTRY, "subprocess", "subprocess_backend:SubprocessBackend")
    script, fields, k8s_codes, expected = SCENARIOS[scenario]
    path = tmp_path / "job.py"
    path.write_text(script)
    monkeypatch.setattr(driver, "FAILURE_GRACE_S", GRACE)
    spec = from_dict({"name": "lc", "backend": backend, "nodes": 2, "nproc_per_node": 1,
                      "launcher": "direct", "script": str(path), **fields})
    live = [tmp_path / "run" / "nodes" / f"node-{i}.log" for i in (0, 1)]
    printed = {"local": _live_logs_say(live, "hanging"), "subprocess": _live_logs_say(live, "hanging"),
               "compose": _containers_say("hanging")}.get(backend, lambda lines: True)
    progress = Interrupter(armed=scenario == "interrupt", printed=printed)
    t0 = time.monotonic()
    if backend == "k8s":
        run = _run_k8s(tmp_path, spec, progress, k8s_codes)
    else:
        run = {"local": _run_local, "compose": _run_compose,
               "subprocess": _run_local}[backend](tmp_path, spec, progress)
    took = time.monotonic() - t0
    m = run.status
    assert m["state"] == expected, (m.get("message"), progress.lines[-5:])
    assert m["finished"]
    outcomes = {n["index"]: n for n in m["node_outcomes"]}
    assert all(run.node_log(i).read_text() for i in (0, 1)), "every node's log is kept"
    if scenario == "pass":
        assert [o["state"] for o in outcomes.values()] == ["succeeded", "succeeded"]
    if scenario == "failing-rank":
        first = m["first_failure"]
        if backend == "k8s":                # the fakes' logs hold results only: the node is named
            assert first["node"] == 1 and first["exit_code"] == 3
        else:
            assert first["rank"] == 1 and first["exit_code"] == 3
        assert outcomes[1]["state"] == "failed"
        assert outcomes[0]["state"] == "stopped" and "after node 1 failed" in outcomes[0]["reason"]
    if scenario == "deadline":
        assert all(o["state"] == "stopped" and "deadline" in o["reason"] for o in outcomes.values())
    if scenario == "interrupt":
        assert all(o["state"] == "stopped" and "SIGINT" in o["reason"] for o in outcomes.values())
    if backend != "k8s" and scenario != "pass":
        word = "joined" if scenario == "failing-rank" else "hanging"
        assert word in run.rank_log(1).read_text()
    if backend in ("local", "subprocess"):
        assert_nothing_left(m["run_id"])
    if backend == "compose":
        from test_backend_compose import _left_of
        assert _left_of(m["run_id"]) == ("", "")
    if scenario == "failing-rank" and backend != "k8s":
        assert took < 120


@pytest.mark.parametrize("name", [*backends.NAMES, "subprocess"])
def test_one_vocabulary_and_an_unbound_backend_says_so_in_one_line(monkeypatch, name):
    """Every backend (and one registered here with one line) has the same verbs; before it
    is bound to a run (submit, attach) there is nothing to delete, and asking for outcomes
    is a LabError naming the binding verbs, never an AssertionError."""
    from labctl.errors import LabError

    monkeypatch.setitem(backends.REGISTRY, "subprocess", "subprocess_backend:SubprocessBackend")
    backend = backends.create(name)
    assert backend.delete() == ""
    with pytest.raises(LabError, match="serves no run yet"):
        backend.describe().outcomes
    for verb in ("submit", "describe", "stream", "signal", "delete"):
        assert callable(getattr(backend, verb))
    for gone in ("take_down", "save_logs", "attached_outcomes", "start", "poll", "wait", "alive",
                 "joined", "stop", "collect", "dump_stacks", "inject", "heal", "attach_by_id"):
        assert not hasattr(backend, gone), \
            f"{name}: {gone} is submit / describe / stream / signal / delete / attach now"
