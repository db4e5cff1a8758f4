"""The run driver against a scripted in-memory backend: the lifecycle rules, fast.

The same rules run for real on every backend in tests/test_lifecycle.py.
"""
from __future__ import annotations

import dataclasses
import json
import os
import signal
import time

import pytest

from labctl import backends, driver, lab
from labctl.backends.base import (Backend, BackendFailure, BackendState, BeginFault, EndFault,
                                  RunView, Stop)
from labctl.errors import LabError
from labctl.outcome import NodeOutcome, NodeState, RunState, spared
from labctl.backends.local.placement import local_placement
from labctl.plan import plan
from labctl.rundir import RunDir
from labctl.spec import from_dict

from conftest import decided


class ScriptedBackend(Backend):
    """Nodes follow a script: {node: [state at poll 1, at poll 2, ...]} (last one sticks)."""
    name = "scripted"
    poll_interval = 0.001

    def __init__(self, progress=lambda line: None, script=None, explode_at=None, signal_at=None):
        super().__init__(progress)
        self.script = script or {}
        self.explode_at, self.signal_at = explode_at, signal_at
        self.calls: list[str] = []
        self.polls = 0
        self.waits: list[float] = []
        self.stopped: set[int] = set()

    def placement(self, spec, run_folder=None):
        return local_placement(spec, 12345)

    def submit(self, plan, rundir):
        self.calls.append("submit")
        self.plan = plan
        return BackendState()

    def describe(self, within=0.0, joins=False):
        if within > 0:                   # the pause between two looks
            self.calls.append("wait")
            self.waits.append(within)
            time.sleep(within)
        return RunView(self.poll)

    def poll(self):
        """The scripted nodes now (what `describe(...).outcomes` reads)."""
        self.polls += 1
        self.calls.append("poll")
        if self.explode_at == self.polls:
            raise RuntimeError("the API changed under us")
        if self.signal_at == self.polls:
            os.kill(os.getpid(), signal.SIGTERM)
        out = []
        for node in self.plan.nodes:
            states = self.script.get(node.index, ["running"])
            state = states[min(self.polls, len(states)) - 1]
            if node.index in self.stopped:
                state = "failed"               # what a stopped process looks like to a backend
            code = {"succeeded": 0, "failed": 1}.get(state)
            out.append(NodeOutcome(node.index, node.hostname, code, NodeState(state)))
        return out

    def signal(self, action):
        if isinstance(action, Stop):
            self.calls.append(f"stop {list(action.indices)}")
            self.stopped |= set(action.indices)
            return []
        return super().signal(action)

    def stream(self, rundir, strict=False):
        for node in self.plan.nodes:
            rundir.write_node_log(node.index, f"log of node {node.index}\n")
        final = self.poll()
        self.calls.append("stream")
        return final

    def delete(self):
        self.calls.append("delete")
        return ""


def _run(tmp_path, grace=0.05, timeout=600, fields=None, **backend_kw):
    spec = from_dict({"nodes": 3, "nproc_per_node": 1, "timeout": timeout, **(fields or {})})
    b = ScriptedBackend(**backend_kw)
    p = plan(spec, b.placement(spec), "lab-test")
    rundir = RunDir.create(p, out=tmp_path / "run")
    return decided(driver.run(p, b, rundir, lambda line: None, grace=grace), rundir), b, rundir


def test_all_nodes_succeeding_passes_and_every_verb_runs_once_in_order(tmp_path):
    result, b, rundir = _run(tmp_path, script={i: ["running", "succeeded"] for i in range(3)})
    assert result.state is RunState.PASSED
    assert b.calls[0] == "submit" and b.calls[-2:] == ["stream", "delete"]
    assert not any(c.startswith("stop") for c in b.calls)
    assert all(rundir.node_log(i).read_text() for i in range(3))


def test_the_backend_waits_between_polls_and_a_lab_seen_ended_is_not_polled_again(tmp_path):
    """Between two polls the driver asks `backend.describe(within)` to wait first (compose
    returns when a container dies, instead of sleeping the interval out); once every node
    has been seen ended, the cleanup goes straight to the collection (an ended node stays
    ended)."""
    result, b, _ = _run(tmp_path, script={i: ["running", "succeeded"] for i in range(3)})
    assert result.state is RunState.PASSED
    assert b.calls == ["submit", "poll", "wait", "poll", "poll", "stream", "delete"]
    assert b.waits == [b.poll_interval]


def test_a_failed_node_stops_the_others_after_the_grace_and_names_why(tmp_path):
    result, b, _ = _run(tmp_path, script={1: ["running", "failed"]})
    assert result.state is RunState.FAILED
    stops = [c for c in b.calls if c.startswith("stop")]
    assert stops == ["stop [0, 2]"]
    assert b.calls.index(stops[0]) < b.calls.index("stream") < b.calls.index("delete")
    states = {o.index: (o.state, o.reason) for o in result.outcomes}
    assert states[1][0] is NodeState.FAILED
    assert states[0] == (NodeState.STOPPED, "stopped by labctl after node 1 failed")


LATE = ["running"] * 300 + ["succeeded"]        # ends well after the grace period


def test_an_elastic_lab_goes_on_without_a_node_it_can_spare(tmp_path):
    result, b, _ = _run(tmp_path, fields={"min_nodes": 2, "max_restarts": 1},
                        script={0: LATE, 1: ["running", "killed"], 2: LATE})
    assert result.state is RunState.PASSED
    assert not any(c.startswith("stop") for c in b.calls), "nobody stopped after the grace"
    lost = result.outcomes[1]
    assert lost.state is NodeState.KILLED, "the dead node's outcome stays what it was"
    assert lost.reason == "the lab went on without it, min_nodes 2 of 3"


def test_an_elastic_lab_fails_below_min_nodes_or_without_node_0(tmp_path):
    result, b, _ = _run(tmp_path, fields={"min_nodes": 2},
                        script={0: LATE, 1: ["running", "killed"], 2: ["running", "running", "failed"]})
    assert result.state is RunState.FAILED and "stop [0]" in b.calls
    result, b, _ = _run(tmp_path / "host", fields={"min_nodes": 1},
                        script={0: ["running", "killed"], 1: LATE, 2: LATE})
    assert result.state is RunState.FAILED and "stop [1, 2]" in b.calls, \
        "node 0 hosts the rendezvous store: nobody goes on without it"


def test_spared_counts_per_replica():
    def outcomes(*states):
        return [NodeOutcome(i, f"n{i}", state=NodeState(s)) for i, s in enumerate(states)]
    assert spared(outcomes("succeeded", "killed", "running", "lost"), 2, 1) == {1, 3}
    assert spared(outcomes("succeeded", "killed", "killed", "running"), 2, 1) == {1}
    assert spared(outcomes("succeeded", "killed"), 2, 2) == set(), "not elastic"


def test_the_deadline_is_a_timeout_with_everything_stopped(tmp_path):
    result, b, _ = _run(tmp_path, timeout=0.05)
    assert result.state is RunState.TIMEOUT and "deadline" in result.message
    assert "stop [0, 1, 2]" in b.calls
    assert all(o.state is NodeState.STOPPED and "deadline" in o.reason for o in result.outcomes)


def test_sigterm_interrupts_and_cleanup_still_completes(tmp_path):
    result, b, _ = _run(tmp_path, signal_at=3)
    assert result.state is RunState.INTERRUPTED and result.signal == "SIGTERM"
    assert b.calls[-2:] == ["stream", "delete"] and "stop [0, 1, 2]" in b.calls
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL or callable(signal.getsignal(signal.SIGTERM))


def test_an_unexpected_exception_in_the_backend_is_an_error_after_full_cleanup(tmp_path):
    result, b, rundir = _run(tmp_path, explode_at=2)
    assert result.state is RunState.ERROR
    assert "RuntimeError: the API changed under us" in result.message
    assert b.calls[-2:] == ["stream", "delete"]
    assert rundir.node_log(0).read_text()


def test_a_backend_failure_ends_the_run_as_failed_with_its_message(tmp_path):
    class Stuck(ScriptedBackend):
        def poll(self):
            if self.polls == 1:           # the watch sees it; the collection works
                self.polls += 1
                raise BackendFailure("pod lab-1 (node 1) cannot be scheduled: 0/3 nodes are available")
            return super().poll()
    spec = from_dict({"nodes": 2, "nproc_per_node": 1})
    b = Stuck()
    p = plan(spec, b.placement(spec), "lab-stuck")
    rundir = RunDir.create(p, out=tmp_path / "r")
    result = decided(driver.run(p, b, rundir, lambda line: None), rundir)
    assert result.state is RunState.FAILED and "cannot be scheduled" in result.message


# ---- the collection is part of the run: never lose a log, never a pass not seen ------
class Collecting(ScriptedBackend):
    """Every node succeeds; `stream` gets `signals` SIGINTs half-way through, or breaks."""

    def __init__(self, signals=0, broken=False, live_logs=False, **kw):
        super().__init__(script={i: ["running", "succeeded"] for i in range(3)}, **kw)
        self.signals, self.broken, self.live_logs = signals, broken, live_logs

    def stream(self, rundir, strict=False):
        rundir.write_node_log(0, "log of node 0\n")
        for _ in range(self.signals):
            os.kill(os.getpid(), signal.SIGINT)          # the handler runs right here
        if self.broken:
            raise RuntimeError("docker compose logs: exit 1")
        return super().stream(rundir)


def _collecting(tmp_path, **kw):
    spec = from_dict({"nodes": 3, "nproc_per_node": 1})
    b = Collecting(**kw)
    p = plan(spec, b.placement(spec), "lab-test")
    rundir = RunDir.create(p, out=tmp_path / "run")
    lines: list[str] = []
    return decided(driver.run(p, b, rundir, lines.append, grace=0.05), rundir), b, lines


def test_one_signal_during_the_collection_lets_it_finish_and_the_outcome_stands(tmp_path):
    result, b, lines = _collecting(tmp_path, signals=1)
    assert b.calls[-2:] == ["stream", "delete"], "every log collected, then deleted"
    assert result.state is RunState.PASSED and result.signal is None and not result.kept
    assert any("SIGINT: collecting the logs first; send it again" in line for line in lines)
    assert result.notes == ["SIGINT arrived while the lab was being cleaned up; every log was "
                            "collected first, and the outcome is the lab's own"]


def test_a_second_signal_cuts_the_collection_short_interrupted_and_nothing_deleted(tmp_path):
    result, b, _ = _collecting(tmp_path, signals=2)
    assert "stream" not in b.calls and "delete" not in b.calls
    assert result.state is RunState.INTERRUPTED and result.signal == "SIGINT" and result.kept
    assert "while collecting the logs: they are incomplete and the lab was kept" in result.message
    assert "labctl down" in result.message


def test_a_signal_during_the_collection_of_an_interrupted_run_cuts_it_short(tmp_path):
    class Interrupted(Collecting):
        def poll(self):
            if self.polls == 1:
                os.kill(os.getpid(), signal.SIGTERM)     # the run's own interrupt
            return super().poll()
    spec = from_dict({"nodes": 3, "nproc_per_node": 1})
    b = Interrupted(signals=1)
    b.script = {i: ["running"] for i in range(3)}
    p = plan(spec, b.placement(spec), "lab-test")
    rundir = RunDir.create(p, out=tmp_path / "run")
    result = decided(driver.run(p, b, rundir, lambda line: None), rundir)
    assert result.state is RunState.INTERRUPTED and result.signal == "SIGTERM" and result.kept
    assert "delete" not in b.calls and "interrupted (SIGINT) while collecting" in result.message


def test_a_collection_error_is_an_error_and_deletes_nothing(tmp_path):
    result, b, lines = _collecting(tmp_path, broken=True)
    assert result.state is RunState.ERROR and result.kept and "delete" not in b.calls
    assert result.message.startswith("collecting the logs failed: RuntimeError: docker compose "
                                     "logs: exit 1; nothing was deleted; `labctl down ")
    assert any(line.startswith("nothing was deleted, so that no log is lost") for line in lines)
    # logs already in the run folder (local): nothing to lose, so nothing may stay behind
    result, b, _ = _collecting(tmp_path / "live", broken=True, live_logs=True)
    assert result.state is RunState.ERROR and not result.kept and b.calls[-1] == "delete"


class Exploding(ScriptedBackend):
    name = "local"

    def poll(self):
        raise ValueError("boom")


def test_lab_up_finishes_status_json_whatever_the_backend_raised(tmp_path, monkeypatch):
    monkeypatch.setitem(backends.REGISTRY, "local", "test_driver:Exploding")
    with pytest.raises(Exception, match="internal error in the local backend: ValueError: boom"):
        lab.up(from_dict({"nodes": 2, "nproc_per_node": 1}), out=str(tmp_path / "run"),
               progress=lambda line: None)
    status = json.loads((tmp_path / "run" / "status.json").read_text())
    assert status["state"] == "error" and status["finished"] and "boom" in status["message"]


class FaultyBackend(ScriptedBackend):
    """Records faults; node 1's first kill-rank finds no rank yet, a partition cannot be done."""
    fault_kinds = ("kill-rank", "stop-node", "partition")

    def __init__(self, **kw):
        super().__init__(**kw)
        self.tries = 0

    def signal(self, action):
        if isinstance(action, BeginFault):
            return [self.inject(action.fault)]
        if isinstance(action, EndFault):
            return [self.heal(action.fault)]
        return super().signal(action)

    def inject(self, fault):
        from labctl.faults import NotYet

        if fault.kind == "kill-rank":
            self.tries += 1
            if self.tries == 1:
                raise NotYet("rank 1 is still importing torch")
        if fault.kind == "partition":
            raise RuntimeError("no network to cut")
        self.calls.append(f"inject {fault}")
        return f"did {fault}"

    def heal(self, fault):
        self.calls.append(f"heal {fault}")
        return f"healed {fault}"


def test_faults_fire_on_the_clock_retry_until_their_target_exists_and_end_before_the_stop(
        tmp_path, monkeypatch):
    import dataclasses

    from labctl.faults import parse as parse_fault

    spec = dataclasses.replace(from_dict({"nodes": 3, "nproc_per_node": 1, "timeout": 600}),
                               faults=tuple(map(parse_fault, ("kill-rank:1@0", "stop-node:2@0+600", "partition:0@0+1"))))
    b = FaultyBackend(script={0: ["pending", "running", "running", "running", "failed"]})
    monkeypatch.setattr("labctl.faults.RETRY_S", 0.001)
    p = plan(spec, b.placement(spec), "lab-test")
    rundir = RunDir.create(p, out=tmp_path / "run")
    driver.run(p, b, rundir, lambda line: None, grace=0.05)
    faults = [json.loads(line) for line in (rundir.path / "faults.jsonl").read_text().splitlines()]
    # nothing before every node ran; the kill fired on its second try; the partition that
    # could not be done is written down and never "ended"; the freeze ended before the stop
    assert b.calls.index("inject stop-node:2@0+600") > 1
    assert [(f["fault"], f["phase"], f["ok"]) for f in faults] == [
        ("stop-node:2@0+600", "begin", True), ("partition:0@0+1", "begin", False),
        ("kill-rank:1@0", "begin", True), ("stop-node:2@0+600", "end", True)]
    assert faults[1]["did"] == "could not: no network to cut"
    assert faults[3]["note"] == "ended early: the lab ended"
    assert b.calls.index("heal stop-node:2@0+600") < b.calls.index("stop [1, 2]")
    assert rundir.status["faults"] == faults


# ---- follow: runs labctl did not start (labctl collect) --------------------------
def _follow(tmp_path, wait=True, timeout=5.0, **backend_kw):
    spec = from_dict({"nodes": 3, "nproc_per_node": 1})
    b = ScriptedBackend(**backend_kw)
    p = plan(spec, b.placement(spec), "lab-test")
    b.plan = p                                   # what attach(run id) binds
    rundir = RunDir.create(p, out=tmp_path / "run")
    return decided(driver.follow(p, b, rundir, lambda line: None, timeout=timeout, wait=wait),
                   rundir), b, rundir


def test_follow_waits_for_every_node_and_never_stops_or_deletes(tmp_path):
    """A failing node is only noted: the others run to their own end (no grace, no stop)."""
    script = {0: ["failed"], 1: ["running"] * 30 + ["succeeded"], 2: ["running", "succeeded"]}
    result, b, rundir = _follow(tmp_path, script=script)
    assert result.state is RunState.FAILED
    assert [o.state for o in result.outcomes] == ["failed", "succeeded", "succeeded"]
    assert "submit" not in b.calls and not any(c.startswith("stop") for c in b.calls)
    assert "delete" not in b.calls and b.calls[-1] == "stream"
    assert rundir.node_log(1).read_text() == "log of node 1\n"
    # exit times only for what ended while watched: node 0 had ended before
    assert [o.exited_s is not None for o in result.outcomes] == [False, True, True]


def test_follow_at_the_timeout_or_without_waiting_writes_the_run_down_as_running(tmp_path):
    result, b, _ = _follow(tmp_path, timeout=0.05, script={0: ["succeeded"]})
    assert result.state is RunState.RUNNING
    assert result.message == ("node(s) 1, 2 still running (not ended within --timeout 0.05s): "
                              "collected what they wrote so far")
    result, b, _ = _follow(tmp_path / "b", wait=False)
    assert result.state is RunState.RUNNING and "(--no-wait)" in result.message
    assert b.calls == ["poll", "poll", "stream"]      # one look, then the logs


class Raising(ScriptedBackend):
    """Its second poll raises what it is given (the first one is the watch's first look)."""

    def __init__(self, exc, **kw):
        super().__init__(**kw)
        self.exc = exc

    def poll(self):
        if self.polls == 1:
            self.polls += 1
            raise self.exc
        return super().poll()


@pytest.mark.parametrize("exc, state, message", [
    (BackendFailure("node 1 lost its pod"), RunState.FAILED, "node 1 lost its pod"),
    (LabError("the cluster said no"), RunState.ERROR, "the cluster said no"),
    (KeyError("x"), RunState.ERROR, "internal error in the scripted backend: KeyError: 'x'"),
])
def test_run_and_follow_classify_what_the_backend_raises_the_same_way(tmp_path, exc, state, message):
    spec = from_dict({"nodes": 2, "nproc_per_node": 1})
    results = []
    for name, go in (("run", lambda p, b, r: driver.run(p, b, r, lambda line: None, grace=0.05)),
                     ("follow", lambda p, b, r: driver.follow(p, b, r, lambda line: None,
                                                              timeout=5.0))):
        b = Raising(exc)
        p = plan(spec, b.placement(spec), "lab-test")
        b.plan = p
        rundir = RunDir.create(p, out=tmp_path / name)
        results.append(decided(go(p, b, rundir), rundir))
        assert b.calls[-1] == ("delete" if name == "run" else "stream"), name
    for result in results:
        assert (result.state, result.message, result.signal) == (state, message, None)
        assert (result.error is None) == isinstance(exc, BackendFailure)
        if not isinstance(exc, BackendFailure) and isinstance(exc, LabError):
            assert result.error is exc            # re-raised by lab.py once the folder is written
    # the lab labctl started is stopped with the reason; the one it watched is not touched
    run_, follow_ = results
    assert [o.state for o in run_.outcomes] == ["stopped", "stopped"]
    assert [o.state for o in follow_.outcomes] == ["running", "running"]


def test_a_signal_stops_a_run_but_only_the_watching_of_a_followed_lab(tmp_path):
    result, b, _ = _run(tmp_path, signal_at=2)
    assert (result.state, result.signal, result.message) == (RunState.INTERRUPTED, "SIGTERM",
                                                              "interrupted (SIGTERM)")
    assert all(o.reason == "stopped by labctl on SIGTERM" for o in result.outcomes)
    result, b, _ = _follow(tmp_path / "f", signal_at=2)
    assert (result.state, result.signal) == (RunState.RUNNING, "SIGTERM")
    assert result.message == ("node(s) 0, 1, 2 still running (SIGTERM stopped the waiting): "
                              "collected what they wrote so far")
    assert not any(c.startswith("stop") or c == "delete" for c in b.calls)


# ---- what a backend says the record must hold, the driver writes -----------------------
class Recording(ScriptedBackend):
    """Says what the record must hold (as local says its guards); `fail` half-way through."""

    def __init__(self, fail=False, **kw):
        super().__init__(script={i: ["running", "succeeded"] for i in range(3)}, **kw)
        self.fail = fail

    def submit(self, plan, rundir):
        super().submit(plan, rundir)
        self.for_record = BackendState({"guards": {"0": 11}}, rank_logs_by_guards=True)
        if self.fail:
            raise LabError("node 1 could not be started")
        self.for_record = BackendState({"guards": {"0": 11, "1": 12, "2": 13}}, True)
        return self.for_record

    def stream(self, rundir, strict=False):
        from labctl.runrecord import Leftover

        self.for_record = dataclasses.replace(self.for_record, leftovers=(Leftover(1, 99, "sleep 600"),))
        return super().stream(rundir)


def test_the_driver_writes_what_the_backend_says_the_record_holds_even_half_way(tmp_path):
    """Backends never write the run record: `submit` returns what it must hold (and keeps it
    in `for_record` as it grows), the driver writes it, status.json as before (its key: the
    lab's backend)."""
    spec = from_dict({"nodes": 3, "nproc_per_node": 1})
    for name, fail in (("whole", False), ("half", True)):
        b = Recording(fail=fail)
        p = plan(spec, b.placement(spec), "lab-test")
        rundir = RunDir.create(p, out=tmp_path / name)
        driver.run(p, b, rundir, lambda line: None, grace=0.05)
        rundir.save()
        status = json.loads((rundir.path / "status.json").read_text())
        assert status["rank_logs_by_guards"] is True
        assert status["local"] == {"guards": {"0": 11} if fail else {"0": 11, "1": 12, "2": 13}}
        # the stream runs after a failed submit too (whatever was started leaves its logs)
        assert status["leftovers"] == [{"node": 1, "pid": 99, "command": "sleep 600"}]


def test_describe_reads_only_the_part_asked_for():
    """A poll reads the outcomes alone: whether the run exists and the joins are other
    questions to the backend (processes, containers, logs), asked only when read, once."""
    asked = []
    view = RunView(lambda: asked.append("outcomes") or [], lambda: asked.append("exists") or True,
                   lambda: asked.append("joined") or 3)
    assert view.outcomes == () and asked == ["outcomes"]
    assert view.exists is True and view.exists is True and asked == ["outcomes", "exists"]
    assert view.joined == 3 and asked == ["outcomes", "exists", "joined"]


class Telling(ScriptedBackend):
    """Says where the run lives before it creates anything (as k8s says its namespace)."""

    def submit(self, plan, rundir):
        self.tell(BackendState({"namespace": "lab", "context": "kind"}))
        self.on_disk = json.loads((rundir.path / "status.json").read_text()).get("local")
        return super().submit(plan, rundir)


def test_what_a_backend_tells_before_it_creates_anything_is_on_disk_at_once(tmp_path):
    """A labctl killed while a backend creates its objects must leave `labctl down` knowing
    where they are: what `tell` says is in status.json before submit goes on."""
    spec = from_dict({"nodes": 1, "nproc_per_node": 1})
    b = Telling(script={0: ["running", "succeeded"]})
    p = plan(spec, b.placement(spec), "lab-test")
    rundir = RunDir.create(p, out=tmp_path / "run")
    driver.run(p, b, rundir, lambda line: None, grace=0.05)
    assert b.on_disk == {"namespace": "lab", "context": "kind"}
