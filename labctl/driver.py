"""The run driver: a lab's lifecycle, written once for every backend.

    start ──► poll every node ──► all ended? ──► stop what runs ──► collect ──► delete
                 │  first failure: grace period, then stop the others
                 │  deadline passed: stop everything (state timeout)
                 │  SIGINT / SIGTERM / SIGHUP: stop everything (state interrupted)

    follow (labctl collect): the same poll loop and collect step on a run started
    elsewhere, with nothing started, stopped or deleted.

Whatever happens — a failing rank, the deadline, a signal, an exception in
the backend — the nodes still running are stopped, every node's log is
collected *before* anything is deleted, and the outcome is decided by one
rule (labctl.outcome.run_state). Backends only say how (labctl/backends/base.py).
"""
from __future__ import annotations

import signal
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

from .backends.base import Backend, BackendFailure, Progress
from .errors import LabError
from .outcome import NodeOutcome, NodeState, RunState, run_state, signal_name
from .plan import LaunchPlan
from .rundir import RunDir

FAILURE_GRACE_S = 8.0     # after the first failure, let the others notice and exit by themselves
FOLLOW_BYTES = 2 << 20    # node log bytes split per node and poll while the lab runs (live logs)
HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(BaseException):
    """A signal asked labctl to stop (BaseException: no `except Exception` swallows it)."""

    def __init__(self, signum: int):
        super().__init__(signal_name(signum))
        self.signal = signal_name(signum)


@dataclass
class RunResult:
    state: RunState
    outcomes: list[NodeOutcome]
    message: str = ""
    signal: str | None = None             # the signal that interrupted the run
    error: LabError | None = None         # the backend's error, re-raised after finalizing
    notes: list[str] = field(default_factory=list)


class _Signals:
    """While `raising`, a handled signal raises Interrupted; afterwards it is only noted."""

    def __init__(self) -> None:
        self.raising = True
        self.deferred: list[int] = []

    def handler(self, signum, frame) -> None:
        if self.raising:
            self.raising = False
            raise Interrupted(signum)
        self.deferred.append(signum)


@contextmanager
def signals_raise() -> Iterator[_Signals]:
    """SIGINT, SIGTERM and SIGHUP raise Interrupted while the lab runs; once cleanup
    starts (`.raising = False`) they are deferred: a second Ctrl-C must not cut the
    log collection short."""
    state = _Signals()
    previous = {s: signal.signal(s, state.handler) for s in HANDLED_SIGNALS}
    try:
        yield state
    finally:
        state.raising = False
        for s, h in previous.items():
            signal.signal(s, h)


def _line(outcomes: list[NodeOutcome]) -> str:
    return "  ".join(f"node-{o.index}: {o.describe()}" + (f" [{o.reason}]" if o.reason and
                     o.state in (NodeState.PENDING, NodeState.RUNNING) else "")
                     for o in outcomes)


@dataclass
class _Watch:
    """What the poll loop saw last, and why it returned."""
    outcomes: list[NodeOutcome]
    deadline_passed: bool = False
    first_bad: NodeOutcome | None = None      # set when the grace after a failure ran out


def _watch(plan: LaunchPlan, backend: Backend, rundir: RunDir, observe, say: Progress,
           clock, t0: float, deadline: float, grace: float | None, w: _Watch) -> None:
    """The one poll loop: until every node has ended, the grace after the first failure
    has run out (`grace` None: never, for runs labctl only watches), or the deadline."""
    first_failure: float | None = None
    last = ""
    while True:
        w.outcomes = observe()
        now = clock()
        line = _line(w.outcomes)
        if line != last:
            say(f"[{now - t0:6.1f}s] {line}")
            last = line
        if all(o.state.ended for o in w.outcomes):
            return
        if backend.live_logs:
            rundir.follow_logs([n.index for n in plan.nodes], FOLLOW_BYTES)
        bad = [o for o in w.outcomes if o.state.bad]
        if bad and first_failure is None and grace is not None:
            first_failure = now
            who = ", ".join(f"node {o.index} {o.describe()}" for o in bad)
            say(f"{who}; stopping the lab in {grace:g}s unless the others finish")
            w.first_bad = bad[0]
        if first_failure is not None and grace is not None and now - first_failure > grace:
            return
        if now > deadline:
            w.deadline_passed = True
            return
        time.sleep(max(0.0, min(backend.poll_interval, deadline - now + 0.01)))


def _say(progress: Progress) -> Progress:
    def say(text: str) -> None:
        try:
            progress(text)
        except OSError:                   # the terminal went away (SIGHUP): keep going
            pass
    return say


def run(plan: LaunchPlan, backend: Backend, rundir: RunDir, progress: Progress,
        grace: float | None = None, clock=time.monotonic) -> RunResult:
    """Run the lab to its end on `backend`; the run folder holds every node's log afterwards."""
    grace = FAILURE_GRACE_S if grace is None else grace
    t0 = clock()
    deadline = t0 + plan.spec.timeout
    state, message, interrupted_by = RunState.PASSED, "", None
    error: LabError | None = None
    exited: dict[int, float] = {}         # node -> seconds after start when first seen ended
    w = _Watch([NodeOutcome(n.index, n.hostname) for n in plan.nodes])
    stop_reason = ""
    started = False
    say = _say(progress)

    def observe() -> list[NodeOutcome]:
        now = round(clock() - t0, 3)
        seen = backend.poll()
        for o in seen:
            if o.state.ended and o.index not in exited:
                exited[o.index] = o.exited_s if o.exited_s is not None else now
            if o.index in exited:
                o.exited_s = exited[o.index]
        return seen

    with signals_raise() as signals:
        try:
            backend.start(plan, rundir)
            started = True
            _watch(plan, backend, rundir, observe, say, clock, t0, deadline, grace, w)
            if w.first_bad is not None:
                stop_reason = f"stopped by labctl after node {w.first_bad.index} failed"
            if w.deadline_passed:
                state, message = RunState.TIMEOUT, f"deadline of {plan.spec.timeout:g}s passed"
                stop_reason = "stopped by labctl at the deadline"
                say(f"timeout: {message}; taking every rank's stack, then stopping the lab")
                for note in backend.dump_stacks(rundir):
                    say(note)
        except (Interrupted, KeyboardInterrupt) as exc:
            signame = exc.signal if isinstance(exc, Interrupted) else "SIGINT"
            state, interrupted_by = RunState.INTERRUPTED, signame
            message = f"interrupted ({signame})"
            stop_reason = f"stopped by labctl on {signame}"
            say(f"{message}: stopping the lab")
        except BackendFailure as exc:
            state, message = RunState.FAILED, str(exc)
            stop_reason = "stopped by labctl: " + str(exc)
            say(f"{exc}; stopping the lab")
        except LabError as exc:
            state, message, error = RunState.ERROR, str(exc), exc
            stop_reason = "stopped by labctl after an error"
        except Exception as exc:          # a bug or an API surprise: still a finished folder
            state = RunState.ERROR
            message = f"internal error in the {backend.name} backend: {type(exc).__name__}: {exc}"
            error = LabError(message)
            stop_reason = "stopped by labctl after an error"
        finally:
            signals.raising = False       # from here on signals wait: the cleanup completes
            finished = _finish(backend, rundir, plan, started, w.outcomes, stop_reason,
                               exited, observe, say)
    outcomes, notes = finished.outcomes, finished.notes
    if signals.deferred and interrupted_by is None:
        notes.append(f"{signal_name(signals.deferred[0])} arrived while the lab was being cleaned up")
    return RunResult(run_state(state, outcomes), outcomes, message, interrupted_by, error, notes)


def follow(plan: LaunchPlan, backend: Backend, rundir: RunDir, progress: Progress,
           timeout: float, wait: bool = True, clock=time.monotonic) -> RunResult:
    """Watch a run that labctl did not start (kubectl, docker compose, a labctl that
    died) through `backend.attach...`, then collect every node's log into the folder.

    The same poll loop and collect step as `run`, but nothing is started, stopped or
    deleted: a failing node is only noted, and at `timeout` (or at once, `wait`
    False) the run is written down as still running. A signal ends the watching,
    not the lab; the logs are collected all the same.
    """
    t0 = clock()
    state, message, interrupted_by = RunState.PASSED, "", None
    error: LabError | None = None
    w = _Watch([NodeOutcome(n.index, n.hostname) for n in plan.nodes])
    say = _say(progress)
    running_seen: set[int] = set()
    exited: dict[int, float] = {}

    def observe() -> list[NodeOutcome]:
        """Exit times only for nodes seen ending while watched: earlier ends are unknown."""
        seen = backend.poll()
        for o in seen:
            if not o.state.ended:
                running_seen.add(o.index)
            elif o.index in running_seen and o.index not in exited:
                exited[o.index] = o.exited_s if o.exited_s is not None else round(clock() - t0, 3)
            if o.index in exited:
                o.exited_s = exited[o.index]
        return seen

    with signals_raise() as signals:
        try:
            if wait:
                _watch(plan, backend, rundir, observe, say, clock, t0, t0 + timeout, None, w)
            else:
                w.outcomes = observe()
                say(_line(w.outcomes))
        except (Interrupted, KeyboardInterrupt) as exc:
            interrupted_by = exc.signal if isinstance(exc, Interrupted) else "SIGINT"
            say(f"{interrupted_by}: no more waiting; collecting what is there (the lab goes on)")
        except BackendFailure as exc:
            state, message = RunState.FAILED, str(exc)
            say(str(exc))
        except LabError as exc:
            state, message, error = RunState.ERROR, str(exc), exc
        except Exception as exc:
            state = RunState.ERROR
            message = f"internal error in the {backend.name} backend: {type(exc).__name__}: {exc}"
            error = LabError(message)
        finally:
            signals.raising = False
            try:
                final = backend.collect(rundir)
            except Exception as exc:      # nothing was saved: say so, never pretend
                final = w.outcomes
                state, message = RunState.ERROR, f"collecting the logs failed: {exc}"
                error = error or LabError(message)
    by_index = {o.index: o for o in final}
    outcomes = [by_index.get(n.index) or NodeOutcome(n.index, n.hostname) for n in plan.nodes]
    for o in outcomes:
        if o.index in exited and o.exited_s is None:
            o.exited_s = exited[o.index]
    going = [o.index for o in outcomes if not o.state.ended]
    if going and state is RunState.PASSED:
        why = (f"{interrupted_by} stopped the waiting" if interrupted_by else
               "--no-wait" if not wait else f"not ended within --timeout {timeout:g}s")
        state = RunState.RUNNING
        message = (f"node(s) {', '.join(map(str, going))} still running ({why}): "
                   "collected what they wrote so far")
    return RunResult(run_state(state, outcomes), outcomes, message, interrupted_by, error)


@dataclass
class _Finished:
    outcomes: list[NodeOutcome]
    notes: list[str]


def _finish(backend: Backend, rundir: RunDir, plan: LaunchPlan, started: bool,
            outcomes: list[NodeOutcome], stop_reason: str, exited: dict[int, float],
            observe, say: Progress) -> _Finished:
    """Stop what still runs, collect every log, then delete: in this order, always."""
    notes: list[str] = []
    stopped: set[int] = set()
    try:
        try:
            outcomes = observe()
        except Exception:
            pass
        running = [o.index for o in outcomes if not o.state.ended]
        if running:
            reason = stop_reason or "stopped by labctl"
            backend.stop(running, reason)
            stopped = set(running)
        final = backend.collect(rundir)
    except Exception as exc:
        notes.append(f"collecting failed: {type(exc).__name__}: {exc}")
        say(notes[-1])
        final = outcomes
    finally:
        try:
            removed = backend.delete()
            if removed:
                say(removed)
        except Exception as exc:
            notes.append(f"cleanup failed: {exc}; run: labctl down {rundir.path}")
            say(notes[-1])
    by_index = {o.index: o for o in final}
    result = []
    for node in plan.nodes:
        o = by_index.get(node.index) or NodeOutcome(node.index, node.hostname)
        if node.index in exited and o.exited_s is None:
            o.exited_s = exited[node.index]
        if node.index in stopped:
            o.state, o.reason = NodeState.STOPPED, stop_reason or "stopped by labctl"
        result.append(o)
    if not started:
        result = [NodeOutcome(n.index, n.hostname) for n in plan.nodes]
    return _Finished(result, notes)
